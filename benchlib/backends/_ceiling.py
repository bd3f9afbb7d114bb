"""The kit's own HTTP client's ceiling: how many streamed requests (and tokens) per second it takes in when the server
answers at once, measured against a loopback server in a process of its own that streams a fixed completion without
any model. A rate an engine is measured at near this ceiling says more about the client than about the engine."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from benchlib.backends._engine import answers, free_port, stop_group
from benchlib.backends._stream import StreamClient

# A server that answers /health and streams `tokens` one-token chunks and [DONE] to every POST, as soon as it is asked.
INSTANT_SERVER = r"""
import asyncio, json, sys

port, tokens = int(sys.argv[1]), int(sys.argv[2])
chunk = "data: " + json.dumps({"choices": [{"index": 0, "text": "a", "token_ids": [1]}]}) + "\n\n"
body = (chunk * tokens + "data: [DONE]\n\n").encode()
stream = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n" % len(body) + body
health = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            writer.write(stream if head.startswith(b"POST") else health)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


asyncio.run(main())
"""


def client_ceiling(seconds: float = 1.0, in_flight: int = 32, tokens: int = 16) -> dict[str, Any]:
    """Requests and tokens per second the client takes in with `in_flight` streamed requests of `tokens` tokens at a time
    for `seconds`, from a loopback server that answers at once."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", INSTANT_SERVER, str(port), str(tokens)], start_new_session=True, stdout=subprocess.DEVNULL)
    try:
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while not answers(base_url, timeout_s=0.5):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the loopback server that measures the client's ceiling did not answer")
            time.sleep(0.05)
        client = StreamClient(base_url, timeout_s=10)
        try:
            done = client.run(_closed_loop(client, seconds, in_flight, tokens))
        finally:
            client.close()
    finally:
        stop_group(server)
    return {"requests_per_s": done / seconds, "tokens_per_s": done * tokens / seconds, "in_flight": in_flight, "tokens": tokens, "seconds": seconds}


async def _closed_loop(client: StreamClient, seconds: float, in_flight: int, tokens: int) -> int:
    """The requests completed by `in_flight` loops that each send the next request as the last ends, for `seconds`."""
    import asyncio

    end = time.perf_counter() + seconds
    body = {"model": "instant", "prompt": [1], "max_tokens": tokens}

    async def loop() -> int:
        count = 0
        while time.perf_counter() < end:
            await client.stream("/v1/completions", body)
            count += 1
        return count

    return sum(await asyncio.gather(*(loop() for _ in range(in_flight))))
