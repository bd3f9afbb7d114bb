"""The kit's streaming client keeps its connection from one request to the next: a stream that ends after its [DONE]
(chunked, as engines send it) is read to its end, so that no request pays for a new connection in its time to first
token."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest

from benchlib.backends._stream import StreamClient


def chunk(data: str) -> bytes:
    event = f"data: {data}\n\n".encode()
    return b"%x\r\n" % len(event) + event + b"\r\n"


@pytest.fixture
def chunked_server() -> Iterator[tuple[str, list[int]]]:
    """A loopback server streaming three chat chunks, [DONE] and the chunked body's end to each POST: (its URL, the
    connections it accepted)."""
    accepted: list[int] = []
    loop = asyncio.new_event_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                for _ in range(3):
                    writer.write(chunk(json.dumps({"choices": [{"index": 0, "delta": {"content": " the"}}]})))
                    await writer.drain()
                writer.write(chunk("[DONE]"))
                await writer.drain()
                await asyncio.sleep(0.01)  # the body's end after the [DONE] event, in a packet of its own
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", accepted
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


def test_three_requests_in_a_row_use_one_connection(chunked_server: tuple[str, list[int]]) -> None:
    url, accepted = chunked_server
    client = StreamClient(url, timeout_s=10)
    try:
        for _ in range(3):
            done = client.run(client.stream("/v1/chat/completions", {"messages": []}))
            assert done.text == " the the the" and done.counts == [1, 1, 1] and done.ttft_s > 0
    finally:
        client.close()
    assert len(accepted) == 1
