"""What a client still sending its request reads when `agmem serve`'s HTTP/1.1 protocol refuses it
(app/cli/stalls.py's lingering close), against other trees'.

Each tree's protocol, configured as `agmem serve` configures it, serves a no-op app that answers
404 at once (no database), on uvloop, in a process of its own. A raw client sends a refused head
and a 4 MB body in one `sendall`, then reads until the close: per shape (two Host headers, a bad
chunk size, a header block past its bound, an Upgrade with a body), how many writes failed (the
connection reset under them) and how many read the whole refusal. Then stdlib urllib, which asks
for the close on every request, posts the body to the app's 404: how many got the 404, and how
many `Connection reset by peer` instead. Not timed; the figures are counts, e.g.

    uv run python -m bench.lingering --against /work/notes25/bmain --tries 50
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent
SIZE = 4_000_000
HEADS = {
    "two Host headers": b"POST /x HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: %d\r\n\r\n"
    % SIZE,
    "a bad chunk size": b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "a header block past its bound": b"GET /x HTTP/1.1\r\nHost: a\r\n",
    "an Upgrade with a body": b"POST /x HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\n"
    b"Connection: Upgrade\r\nContent-Length: %d\r\n\r\n" % SIZE,
}
FILLS = {"a header block past its bound": b"X-A: " + b"a" * 1000 + b"\r\n"}
SERVER = """
import sys
sys.path.insert(0, sys.argv[1])
import uvicorn
from app.cli.wire import JsonErrorsProtocol

async def app(scope, receive, send):
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

config = uvicorn.Config(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="critical",
    access_log=False, http=JsonErrorsProtocol.configured(idle_timeout=60.0), ws="none",
    lifespan="off")
uvicorn.Server(config).run()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def refused(port: int, request: bytes) -> tuple[bool, bool]:
    """Whether the write failed, and whether the whole answer was read."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        failed = False
        try:
            connection.sendall(request)
        except OSError:
            failed = True
        answer = b""
        try:
            while chunk := connection.recv(65536):
                answer += chunk
        except OSError:
            pass
    head, _, body = answer.partition(b"\r\n\r\n")
    lengths = [
        int(line.split(b":")[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    ]
    return failed, bool(lengths) and len(body) >= lengths[0]


def with_urllib(port: int) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/x", data=b"x" * SIZE)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(answer.status)
    except urllib.error.HTTPError as error:
        return str(error.code)
    except OSError as error:
        reason = getattr(error, "reason", error)
        return type(reason).__name__


def measure(tree: Path, tries: int) -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(tree), str(port)], cwd=tree)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        print(f"{tree}:")
        for name, head in HEADS.items():
            fill = FILLS.get(name, b"x" * 1024)
            request = head + fill * (SIZE // len(fill))
            outcomes = [refused(port, request) for _ in range(tries)]
            failed = sum(failed for failed, _ in outcomes)
            whole = sum(whole for _, whole in outcomes)
            print(f"  {name}: writes failed {failed} of {tries}; whole refusal read {whole}")
        seen = Counter(with_urllib(port) for _ in range(tries))
        print(f"  urllib, a 404 before its body: {dict(seen)}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, action="append", default=[])
    parser.add_argument("--tries", type=int, default=50)
    args = parser.parse_args()
    for tree in [TREE, *args.against]:
        measure(tree.resolve(), args.tries)


if __name__ == "__main__":
    main()
