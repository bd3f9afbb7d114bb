"""Does the kit's client time an engine as a plain client does? Its TTFT and TPOT against a plain asynchronous client of
a few lines, at the same number of requests in flight, on the same server.

The server is `transformers serve` started by the kit on a tiny Llama-architecture folder (made here, as the tests make
theirs); `--server steady`, a loopback stand-in of a few lines in a process of its own that streams its tokens after
fixed delays (`--first-ms` to the first, `--every-ms` between the others), so that what differs between the two clients
is theirs alone (`transformers serve`'s own time to first token varies from 9 to 35 ms between identical requests on 2
cores, more than the clients could differ); or `--url` with `--model-name`. The kit's side is the `openai` backend's own request path (its asynchronous
client, its chunk clock, its token counting); the plain side is httpx's `AsyncClient` and `aiter_lines`, the first
content chunk's time and the last's. Rounds alternate the two (which goes first alternates too), each `--in-flight` requests at once; printed: the median
TTFT and TPOT of each and their ratios. Target: both ratios within 5% of 1 (exit status 1 otherwise).

    .venv/bin/python benchmarks/engine_client.py [--in-flight 1] [--rounds 20] [--new-tokens 16]
        [--server engine|steady [--first-ms 20 --every-ms 5] | --url URL --model-name NAME]

Run it alone on the machine: the two clients share it with the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' checkpoint maker

from benchlib.backends._engine import answers, free_port, start_engine, stop_group  # noqa: E402
from benchlib.backends._stream import StreamClient  # noqa: E402
from benchlib.backends.openai import ENGINE_ENVIRONMENT, OpenAIBackend, OpenAIOptions, Served, _tokenizer, with_template  # noqa: E402
from benchlib.paths import PARAMETERS_DIR  # noqa: E402
from benchlib.workloads.inputs import sample_text  # noqa: E402
from tests.checkpoints import save_llama  # noqa: E402

PROMPT = " ".join(sample_text().split()[:12])  # words of the tokenizer's own vocabulary

# The steady server: /health, and to every POST a chat completion's stream of `tokens` chunks of one word each, the first
# after `first_ms`, each other `every_ms` after the one before, then [DONE] (chunked transfer, the connection kept).
STEADY_SERVER = r"""
import asyncio, json, sys

port, first_s, every_s, word = int(sys.argv[1]), float(sys.argv[2]) / 1000, float(sys.argv[3]) / 1000, sys.argv[4]
health = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def chunk(data):
    event = ("data: " + data + "\n\n").encode()
    return b"%x\r\n" % len(event) + event + b"\r\n"


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
            body = json.loads(await reader.readexactly(length)) if length else {}
            if not head.startswith(b"POST"):
                writer.write(health)
                await writer.drain()
                continue
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            tokens = json.loads(body.get("generation_config") or "{}").get("max_new_tokens") or body.get("max_tokens") or 16
            for number in range(tokens):
                await asyncio.sleep(first_s if number == 0 else every_s)
                writer.write(chunk(json.dumps({"choices": [{"index": 0, "delta": {"content": " " + word}}]})))
                await writer.drain()
            writer.write(chunk("[DONE]") + b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


asyncio.run(main())
"""


def start_steady(first_ms: float, every_ms: float) -> tuple[subprocess.Popen, str]:
    """The steady server on a free loopback port, once it answers: (its process, its URL)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", STEADY_SERVER, str(port), str(first_ms), str(every_ms), PROMPT.split()[0].lower()], start_new_session=True)
    base_url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 10
    while not answers(base_url, timeout_s=0.5):
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the steady server did not answer")
        time.sleep(0.05)
    return server, base_url


async def plain(client: httpx.AsyncClient, body: dict, in_flight: int, new_tokens: int) -> list[tuple[float, float]]:
    """The plain client: `in_flight` streamed requests at once; each one's (TTFT, TPOT)."""

    async def one() -> tuple[float, float]:
        start, times = time.perf_counter(), []
        async with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:") and line[5:].strip() != "[DONE]":
                    choices = json.loads(line[5:]).get("choices") or [{}]
                    if (choices[0].get("delta") or {}).get("content"):
                        times.append(time.perf_counter())
        return times[0] - start, (times[-1] - times[0]) / (new_tokens - 1)

    return list(await asyncio.gather(*(one() for _ in range(in_flight))))


async def plain_client(base_url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, timeout=600)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--server", choices=("engine", "steady"), default="engine", help="transformers serve (default), or the steady stand-in")
    parser.add_argument("--first-ms", type=float, default=20.0, help="steady: the delay to its first token")
    parser.add_argument("--every-ms", type=float, default=5.0, help="steady: the delay between its other tokens")
    parser.add_argument("--url", help="a running server with /v1/chat/completions (default: transformers serve, started here)")
    parser.add_argument("--model-name", help="the model to ask a --url server for")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--show-log", action="store_true")
    args = parser.parse_args()

    import yaml

    options = yaml.safe_load((PARAMETERS_DIR / "environments" / "cpu-transformers-serve.yaml").read_text())["options"]
    with tempfile.TemporaryDirectory() as scratch:
        folder = save_llama(Path(scratch) / "llama")
        engine = steady = None
        if args.url:
            base_url, name = args.url.rstrip("/"), args.model_name
        elif args.server == "steady":
            steady, base_url = start_steady(args.first_ms, args.every_ms)
            name = "steady"
        else:
            served_folder = with_template(folder, Path(scratch) / "cache", "benchmark")
            engine = start_engine(options["serve"], str(served_folder), "float32", Path(scratch) / "engine.log", 300, env=ENGINE_ENVIRONMENT)
            base_url, name = engine.base_url, str(served_folder)
        try:
            backend = OpenAIBackend(mode="stream", options=OpenAIOptions(**{**options, "serve": None, "url": base_url}))
            tokenizer = _tokenizer(folder, False)
            served = Served(StreamClient(base_url), name, tokenizer, None)
            ids = np.asarray([tokenizer(PROMPT, add_special_tokens=False)["input_ids"]] * args.in_flight)
            body = backend.body(served, ids[0], args.new_tokens)
            with asyncio.Runner() as runner:  # one event loop and one client for every round, as the kit's
                client = runner.run(plain_client(base_url))
                backend.completions(served, ids, args.new_tokens)  # warm-up, and each client's connections
                runner.run(plain(client, body, args.in_flight, args.new_tokens))
                kit, plain_times = [], []
                for number in range(args.rounds):  # each first in every other round: the engine's state after the other's round
                    if number % 2:
                        plain_times += runner.run(plain(client, body, args.in_flight, args.new_tokens))
                    backend.requests.clear()
                    backend.completions(served, ids, args.new_tokens)
                    kit += backend.requests
                    if not number % 2:
                        plain_times += runner.run(plain(client, body, args.in_flight, args.new_tokens))
                runner.run(client.aclose())
            served.client.close()
        finally:
            if steady is not None:
                stop_group(steady)
            if engine is not None:
                engine.stop()
                print((Path(scratch) / "engine.log").read_text()[-3000:]) if "--show-log" in sys.argv else None
    worst = 0.0
    server = f"the steady server ({args.first_ms:g} ms to the first token, {args.every_ms:g} ms between)" if steady is not None else args.url or "transformers serve"
    print(f"{server}: {args.in_flight} in flight, {args.rounds} rounds, {args.new_tokens} new tokens")
    for index, label in enumerate(("TTFT", "TPOT")):
        mine, theirs = np.median([request[index] for request in kit]), np.median([request[index] for request in plain_times])
        worst = max(worst, abs(mine / theirs - 1))
        print(f"{label}: kit {1000 * mine:.3f} ms, plain client {1000 * theirs:.3f} ms, ratio {mine / theirs:.3f}")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
