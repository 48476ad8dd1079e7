"""A local fake of the Gemini HTTP API, for driving the real google-genai client in tests.

It records every request (method, path, headers, JSON body) and answers from a script of queued
responses per route suffix (e.g. ":generateContent"), falling back to a default responder.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[["RecordedRequest"], "FakeResponse"]


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes = b""  # the body's bytes, as sent


@dataclass
class FakeResponse:
    status: int = 200
    body: Any = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None  # sent as is instead of JSON (for malformed answers)
    drop: bool = False  # close the connection without answering (a network failure)
    # A slow-drip body: `drip_bytes` at a time, `drip_s` apart (each gap under a read timeout).
    drip_s: float = 0.0
    drip_bytes: int = 1
    cut_at: int | None = None  # send the body's first `cut_at` bytes, then close (a cut answer)


@dataclass
class Connection:
    """One client connection: the paths asked on it, and whether the client has closed it."""

    paths: list[str] = field(default_factory=list)
    closed: bool = False


def text_answer(text: str, *, prompt_tokens: int = 10, output_tokens: int = 5) -> dict[str, Any]:
    """A generateContent answer with one text part and usage metadata."""
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": prompt_tokens + output_tokens,
        },
    }


class FakeGemini:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.queued: dict[str, deque[FakeResponse]] = defaultdict(deque)
        self.defaults: dict[str, Responder] = {}
        self.connections: list[Connection] = []
        self.lock = threading.Lock()
        self.url = ""

    def queue(self, route_suffix: str, *responses: FakeResponse) -> None:
        with self.lock:
            self.queued[route_suffix].extend(responses)

    def on(self, route_suffix: str, responder: Responder) -> None:
        self.defaults[route_suffix] = responder

    def calls(self, route_suffix: str) -> list[RecordedRequest]:
        with self.lock:
            return [r for r in self.requests if r.path.split("?")[0].endswith(route_suffix)]

    def left_open(self, route_suffix: str) -> list[Connection]:
        """The connections that asked `route_suffix` and that their client has not closed."""
        with self.lock:
            return [
                c
                for c in self.connections
                if not c.closed and any(p.split("?")[0].endswith(route_suffix) for p in c.paths)
            ]

    def respond(self, request: RecordedRequest) -> FakeResponse:
        route = request.path.split("?")[0]
        with self.lock:
            self.requests.append(request)
            for suffix, queue in self.queued.items():
                if route.endswith(suffix) and queue:
                    return queue.popleft()
        for suffix, responder in self.defaults.items():
            if route.endswith(suffix):
                return responder(request)
        return FakeResponse(404, {"error": {"code": 404, "message": f"no fake for {route}"}})


def _handler(fake: FakeGemini) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The headers and the body go out in two writes: with Nagle's algorithm the body waited
        # for the client's delayed ACK of the headers, 40 ms on every call of a kept-alive
        # connection (a reused google-genai client's), which no real server adds.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            return

        def handle(self) -> None:
            # Ends when the client closes the connection (or the server does, for `drop`).
            self.connection_log = Connection()
            with fake.lock:
                fake.connections.append(self.connection_log)
            try:
                super().handle()
            finally:
                with fake.lock:
                    self.connection_log.closed = True

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            request = RecordedRequest(
                self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
            )
            with fake.lock:
                self.connection_log.paths.append(self.path)
            response = fake.respond(request)
            if response.delay_s:
                threading.Event().wait(response.delay_s)
            if response.drop:
                self.close_connection = True
                return
            payload = (
                response.raw if response.raw is not None else json.dumps(response.body).encode()
            )
            # The `Date` a response sets is the server's clock (one behind or ahead of ours);
            # unset, the handler's own, as http.server sends it.
            self.send_response_only(response.status)
            self.send_header("server", self.version_string())
            if not any(key.lower() == "date" for key in response.headers):
                self.send_header("date", self.date_time_string())
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            for key, value in response.headers.items():
                self.send_header(key, value)
            self.end_headers()
            if response.cut_at is not None:
                payload = payload[: response.cut_at]
                self.close_connection = True
            try:
                if response.drip_s:
                    self.wfile.flush()
                    for start in range(0, len(payload), response.drip_bytes):
                        self.wfile.write(payload[start : start + response.drip_bytes])
                        self.wfile.flush()
                        threading.Event().wait(response.drip_s)
                else:
                    self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_GET = do_POST = do_DELETE = do_PATCH = _serve

    return Handler


@contextmanager
def fake_gemini() -> Iterator[FakeGemini]:
    """Start the fake on a free loopback port; `fake.url` is the base URL to give google-genai."""
    fake = FakeGemini()
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
