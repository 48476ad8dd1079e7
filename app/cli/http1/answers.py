"""What `agmem serve`'s HTTP/1.1 protocol (app/cli/wire.py) answers a request it refuses before
the app sees it, in the shared error shape: the details' texts and the refusals built of them."""

from __future__ import annotations

from app.cli.refusals import Header, Refused, error_body
from app.errors import BadRequest, HTTPVersionNotSupported, MethodNotImplemented

BAD_REQUEST_DETAIL = (
    "the request is not valid HTTP/1.1 (a malformed request line, header or chunked body, a bad "
    "or conflicting Content-Length, or a URL over 64 KiB: send a long context prompt with "
    "POST /api/context)"
)
TWO_HOSTS_DETAIL = "the request has more than one Host header"
NO_HOST_DETAIL = (
    "the request has no Host header, which HTTP/1.1 requires (RFC 9112, 3.2): send the address "
    "it is for, e.g. `Host: 127.0.0.1:37777`"
)
UPGRADE_BODY_DETAIL = (
    "the request asks for an Upgrade and carries a body: this service speaks HTTP/1.1 only and "
    "its parser skips the body of such a request; send it without `Upgrade` (curl: --http1.1)"
)
NO_VERSION_DETAIL = (
    "the request line has no HTTP version (HTTP/0.9's shape, `GET /health` alone), which this "
    "service does not serve: send `GET /health HTTP/1.1` with the address it is for, e.g. "
    "`Host: 127.0.0.1:37777`"
)
VERSION_DETAIL = (
    "the request line names HTTP/{version}; this service speaks HTTP/1.1 (and 1.0) on this "
    "port: send `GET /health HTTP/1.1` with the address it is for, e.g. `Host: 127.0.0.1:37777`"
)
CONNECT_DETAIL = (
    "CONNECT asks for a tunnel through a proxy, and this service is no proxy: it serves its "
    "routes directly (a client whose HTTP_PROXY or HTTPS_PROXY names this address sends it)"
)
PRI_DETAIL = (
    "the PRI method is only HTTP/2's connection preface (`PRI * HTTP/2.0`), and this service "
    "speaks HTTP/1.1 (and 1.0) on this port: send `GET /health HTTP/1.1`"
)
PROTOCOL_DETAIL = (
    "the request line names {protocol}, not HTTP; this service speaks HTTP/1.1 (and 1.0) on this "
    "port: send `GET /health HTTP/1.1` with the address it is for, e.g. `Host: 127.0.0.1:37777`"
)
METHOD_DETAIL = (
    "the request's method `{method}` is none this service knows (RFC 9110, 15.6.2); its routes "
    "take HTTP/1.1's (GET, POST, PUT, DELETE...): send `GET /health HTTP/1.1` with the address it "
    "is for, e.g. `Host: 127.0.0.1:37777`"
)
# A request still open when a second signal hurries the stop: retry after about what a restart
# takes.
STOPPING_RETRY_AFTER: Header = (b"retry-after", b"5")
STOPPING_DETAIL = (
    "the service is stopping (a second Ctrl-C or SIGTERM) and cut the request short before "
    "answering it; retry it once the service is back"
)


def no_version() -> Refused:
    body = error_body(BadRequest(NO_VERSION_DETAIL))
    cause = "refused a request line without an HTTP version (400)"
    return Refused(b"400 Bad Request", body, [], cause)


def version_not_supported(version: str) -> Refused:
    body = error_body(HTTPVersionNotSupported(VERSION_DETAIL.format(version=version)))
    cause = f"refused a request line of HTTP/{version} (505)"
    return Refused(b"505 HTTP Version Not Supported", body, [], cause)


def connect_refusal() -> Refused:
    """A CONNECT's refusal, whatever else its head holds (no Host, a malformed target):
    llhttp reads it as an upgrade, after which come a tunnel's bytes (they were read as the
    next request). RFC 9110, 15.6.2: a method the server supports for no resource is a 501."""
    body = error_body(MethodNotImplemented(CONNECT_DETAIL))
    return Refused(b"501 Not Implemented", body, [], "refused a CONNECT (501)")
