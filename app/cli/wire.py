"""The answer to a request the HTTP parser refuses, in the service's error shape.

uvicorn answers what it cannot parse itself, before the app sees anything, with a plain-text
`400 Invalid HTTP request received.`: a malformed request line, header or chunk, a bad,
negative or conflicting `Content-Length`, both `Content-Length` and `Transfer-Encoding`, a URL
over 64 KiB (a long `prompt` on `GET /api/context`). A client that reads every error as
`{"error", "detail"}` failed to parse that one; the protocol below sends the same 400 in the
shared shape and still closes the connection, as uvicorn does (the parser's state is lost).
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

BAD_REQUEST_DETAIL = (
    "the request is not valid HTTP/1.1 (a malformed request line, header or chunked body, a bad "
    "or conflicting Content-Length, or a URL over 64 KiB: send a long context prompt with "
    "POST /api/context)"
)
_BODY = json.dumps({"error": "BadRequest", "detail": BAD_REQUEST_DETAIL}).encode()


class JsonErrorsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol as `agmem serve` ran it (httptools, which uvicorn[standard]
    installs, is what its "auto" picks), with its 400 as JSON."""

    def send_400_response(self, msg: str) -> None:
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        defaults = self.server_state.default_headers  # date and server, as uvicorn sends them
        head += [name + b": " + value + b"\r\n" for name, value in defaults]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(_BODY)).encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + _BODY)
        self.transport.close()
