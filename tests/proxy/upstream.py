"""A fake upstream Gemini API that can stream: SSE chunks sent one by one, with pauses.

It records each request (path with query, headers, JSON body) and answers from a queue of scripted
responses; with nothing queued it answers a plain text reply.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.gemini import RecordedRequest, text_answer


@dataclass
class Scripted:
    status: int = 200
    body: Any = None  # JSON answer for generateContent (or an error body)
    chunks: list[Any] = field(default_factory=list)  # one JSON response per SSE event
    pause_s: float = 0.0  # between streamed chunks
    raw_chunks: list[bytes] | None = None  # sent as is, for split-event tests
    cut: bool = False  # the stream's connection closed after its pieces, without its last chunk


def sse_bytes(responses: list[Any]) -> list[bytes]:
    return [f"data: {json.dumps(r)}\r\n\r\n".encode() for r in responses]


class FakeUpstream:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.script: deque[Scripted] = deque()
        self.lock = threading.Lock()
        self.url = ""

    def queue(self, *answers: Scripted) -> None:
        with self.lock:
            self.script.extend(answers)

    def next(self, request: RecordedRequest) -> Scripted:
        with self.lock:
            self.requests.append(request)
            if self.script:
                return self.script.popleft()
        return Scripted(body=text_answer("default answer"), chunks=[text_answer("default")])


def _handler(fake: FakeUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out as separate writes; without this, Nagle's algorithm and delayed
        # ACKs add ~40 ms to every answer, which would swamp the proxy's own latency.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            return

        def send_cors(self) -> None:
            # As Google's API answers a browser's call: its own CORS for the caller's origin.
            origin = self.headers.get("origin")
            if origin:
                self.send_header("access-control-allow-origin", origin)
                self.send_header("access-control-expose-headers", "x-upstream-marker")

        def send_json_head(self, answer: Scripted) -> bytes:
            """The status and headers of `answer` as JSON; its body, for the caller to send."""
            payload = json.dumps(answer.body if answer.body is not None else {}).encode()
            self.send_response(answer.status)
            self.send_header("content-type", "application/json; charset=UTF-8")
            self.send_header("content-length", str(len(payload)))
            self.send_header("x-upstream-marker", "fake")
            self.send_cors()
            self.end_headers()
            return payload

        def do_HEAD(self) -> None:
            # As Google's API answers a HEAD: the headers its GET would carry, no body.
            headers = {k.lower(): v for k, v in self.headers.items()}
            self.send_json_head(fake.next(RecordedRequest("HEAD", self.path, headers, None)))

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except (ValueError, RecursionError):
                body = raw.decode("utf-8", "replace")
            headers = {k.lower(): v for k, v in self.headers.items()}
            answer = fake.next(RecordedRequest("POST", self.path, headers, body, raw))
            streaming = ":streamGenerateContent" in self.path and answer.status < 400
            if not streaming:
                self.wfile.write(self.send_json_head(answer))
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.send_header("x-upstream-marker", "fake")
            self.send_cors()
            self.end_headers()
            pieces = answer.raw_chunks or sse_bytes(answer.chunks)
            try:
                for piece in pieces:
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.flush()
                    if answer.pause_s:
                        time.sleep(answer.pause_s)
                if answer.cut:
                    self.close_connection = True
                    return
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


@contextmanager
def fake_upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    # shutdown() waits for the loop's next check of its flag: every 0.5 s by default, which
    # every test using the fake paid on exit (0.25 s on average).
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
