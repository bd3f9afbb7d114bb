"""Streamed requests to an OpenAI-compatible server through one asynchronous HTTP client (httpx) whose event loop runs in
a thread of its own, so that any number of requests are in flight at once while the callers (a cell, LoadGen's
serving threads) wait for theirs.

A request's clock: `start` as it is sent, then the arrival of every chunk that carries content (text or token ids):
the time to first token (TTFT) is the first such chunk's, the time per output token (TPOT) MLPerf's and vLLM's
(the last content chunk minus the first, over the tokens after the first), and the inter-token latencies the gaps
between content chunks. A chunk that carries several tokens counts each (its gaps after the first are 0)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from benchlib.backends import lazy_import

httpx = lazy_import("httpx")  # imported by a kernel that serves, not by every kernel that loads the backends
T = TypeVar("T")
DONE = "[DONE]"


@dataclass
class Completion:
    """One streamed completion as it arrived: when it was sent, each content chunk's time and token count, its text,
    its token ids where the server gave them, its usage where it reported one, and why it finished."""

    start: float
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    text: str = ""
    token_ids: list[int] | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None

    @property
    def tokens(self) -> int:
        """The tokens streamed (each content chunk's)."""
        return sum(self.counts)

    @property
    def ttft_s(self) -> float:
        return self.times[0] - self.start

    @property
    def tpot_s(self) -> float | None:
        """(the last content chunk - the first) / (tokens - 1); None for one token."""
        return (self.times[-1] - self.times[0]) / (self.tokens - 1) if self.tokens > 1 else None

    def token_times(self) -> list[float]:
        """The arrival time of each token (a chunk's tokens all at its time)."""
        return [at for at, count in zip(self.times, self.counts, strict=True) for _ in range(count)]


class MalformedStream(RuntimeError):
    """The server's stream is not the OpenAI API's: an event that is not JSON, or an error event."""


def content_of(chunk: dict[str, Any]) -> tuple[str, list[int] | None]:
    """A chunk's content: (its text, its token ids or None), for a completion's or a chat completion's chunk."""
    choices = chunk.get("choices") or []
    if not choices:
        return "", None
    choice = choices[0]
    delta = choice.get("delta")
    text = (delta.get("content") if delta is not None else choice.get("text")) or ""
    ids = choice.get("token_ids")
    return text, list(ids) if ids is not None else None


class StreamClient:
    """An `httpx.AsyncClient` on an event loop in its own thread; `run` waits for a coroutine from any thread."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None, timeout_s: float = 600.0) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="http-client", daemon=True)
        self._thread.start()
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)

        async def make() -> httpx.AsyncClient:
            return httpx.AsyncClient(base_url=base_url, headers=headers or {}, timeout=timeout_s, limits=limits)

        self.client = self.run(make())

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the client's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def close(self) -> None:
        """Close the client and stop its loop."""
        if self._loop.is_closed():
            return
        self.run(self.client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def stream(self, path: str, body: dict[str, Any], on_chunk: Callable[[Completion], None] | None = None) -> Completion:
        """POST `body` (streamed) to `path`; `on_chunk(completion so far)` is called at each content chunk as it arrives."""
        done = Completion(start=time.perf_counter())
        async with self.client.stream("POST", path, json={**body, "stream": True}) as response:
            if response.is_error:
                await response.aread()
                raise MalformedStream(f"HTTP {response.status_code} from {path}: {' '.join(response.text.split())[:300]}")
            ended = False  # after [DONE], the stream is read on to its end, so that its connection is kept for the next request
            async for line in response.aiter_lines():
                if ended or not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == DONE:
                    ended = True
                    continue
                arrived = time.perf_counter()
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    raise MalformedStream(f"an event of the stream is not JSON: {data[:200]!r}") from None
                if not isinstance(chunk, dict) or "error" in chunk:
                    raise MalformedStream(f"the server sent an error in the stream: {str(chunk.get('error') if isinstance(chunk, dict) else chunk)[:300]}")
                if chunk.get("usage"):
                    done.usage = chunk["usage"]
                text, ids = content_of(chunk)
                if chunk.get("choices") and chunk["choices"][0].get("finish_reason"):
                    done.finish_reason = chunk["choices"][0]["finish_reason"]
                count = len(ids) if ids is not None else (1 if text else 0)
                if count == 0:
                    continue
                done.times.append(arrived)
                done.counts.append(count)
                done.text += text
                if ids is not None:
                    done.token_ids = [*(done.token_ids or []), *ids]
                if on_chunk is not None:
                    on_chunk(done)
        return done


async def gathered(calls: list[Awaitable[T]]) -> list[T]:
    """Every one of `calls` at once; the first failure is raised once all have ended."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]
