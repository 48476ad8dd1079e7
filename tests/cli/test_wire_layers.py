"""The protocol's hot path calls its bases by name (`super()` costs 0.15 us a call on Python
3.11): a layer between (app/cli/stalls.py, app/cli/headers.py) that came to define one of those
callbacks would be skipped without a sign. The calls are found in the source (a list kept by
hand let a new one go unchecked): `Base.method(self, ...)`, or `alias(self, ...)` for a
module's `alias = Base.method`, inside a class whose MRO holds Base. So is `in_head`, inlined
where a read comes."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

import app.cli
from app.cli.headers import HeaderBoundProtocol
from app.cli.wire import JsonErrorsProtocol

CLI = Path(app.cli.__file__).parent


def _resolved(node: ast.expr, namespace: dict[str, object]) -> object | None:
    """What a dotted name (`HttpToolsProtocol`, `httptools.HttpRequestParser`) is in the
    module, or None when the expression is no such name."""
    if isinstance(node, ast.Name):
        return namespace.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolved(node.value, namespace)
        return None if owner is None else getattr(owner, node.attr, None)
    return None


def _calls_by_name() -> list[tuple[str, type, str, type]]:
    """(where, the calling class, the method, the base it names) for each such call."""
    found = []
    for path in sorted(CLI.rglob("*.py")):  # app/cli/http1/ too, where the protocol's layers are
        relative = path.relative_to(CLI).with_suffix("")
        module = importlib.import_module(".".join(["app.cli", *relative.parts]))
        namespace = vars(module)
        tree = ast.parse(path.read_text())
        aliases = {
            target.id: statement.value
            for statement in tree.body
            if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Attribute)
            for target in statement.targets
            if isinstance(target, ast.Name)
        }
        for definition in ast.walk(tree):
            if not isinstance(definition, ast.ClassDef):
                continue
            cls = namespace[definition.name]
            assert inspect.isclass(cls)
            for call in ast.walk(definition):
                if not isinstance(call, ast.Call) or not call.args:
                    continue
                first = call.args[0]
                if not (isinstance(first, ast.Name) and first.id == "self"):
                    continue
                named = call.func
                if isinstance(named, ast.Name) and named.id in aliases:
                    named = aliases[named.id]
                if not isinstance(named, ast.Attribute):
                    continue
                base = _resolved(named.value, namespace)
                if inspect.isclass(base) and base in cls.__mro__[1:]:
                    where = f"{path.relative_to(CLI)}:{call.lineno} {cls.__name__}"
                    found.append((where, cls, named.attr, base))
    return found


CALLED_BY_NAME = _calls_by_name()


def test_the_calls_by_name_are_found() -> None:
    # The hot path's own (app/cli/wire.py): a finder that found none would check nothing.
    assert {(cls.__name__, name) for _, cls, name, _ in CALLED_BY_NAME} >= {
        ("JsonErrorsProtocol", "data_received"),
        ("RefusingParser", "feed_data"),
    }


@pytest.mark.parametrize(
    ("where", "cls", "name", "named"),
    CALLED_BY_NAME,
    ids=[f"{where} -> {named.__name__}.{name}" for where, _, name, named in CALLED_BY_NAME],
)
def test_no_layer_between_a_class_and_the_base_it_names_defines_the_callback(
    where: str, cls: type, name: str, named: type
) -> None:
    between = cls.__mro__[1 : cls.__mro__.index(named)]
    assert [base.__name__ for base in between if name in vars(base)] == [], where


# `in_head` (app/cli/headers.py) is inlined by hand in `JsonErrorsProtocol.data_received` (a
# method call a read saved): the two must not drift apart.


def _returned(function: Callable[..., Any]) -> ast.expr:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    returns = [node for node in ast.walk(tree) if isinstance(node, ast.Return)]
    assert len(returns) == 1
    assert returns[0].value is not None
    return returns[0].value


def _inlined_in_head() -> ast.expr:
    """The condition `data_received` reads as `in_head`: the one its `if not (...)` tests."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(JsonErrorsProtocol.data_received)))
    tests = [
        node.test.operand
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.UnaryOp)
        and isinstance(node.test.op, ast.Not)
    ]
    assert len(tests) == 1, "data_received no longer tests `in_head` inline, once"
    return tests[0]


def test_data_received_inlines_in_head_as_written() -> None:
    assert ast.dump(_inlined_in_head()) == ast.dump(_returned(HeaderBoundProtocol.in_head))


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: object = None) -> object:
        addresses = {"sockname": ("127.0.0.1", 37777), "peername": ("127.0.0.1", 50000)}
        return addresses.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _app(scope: object, receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


# A request's pieces as reads, each after the state it names: every place a read can fall.
CHUNKED = b"POST /api/observe HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
SIZED = b"POST /api/observe HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 6\r\n\r\n"
READS = [
    (b"POST /api/obs", "before a request"),
    (b"erve HTTP/1.1\r\nHo", "in the request line"),
    (b"st: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n", "in the headers"),
    (b"\r\n", "in the headers, their last line whole"),
    (b"5\r\n", "after the header block"),
    (b"ab", "after a chunk's header"),
    (b"cde\r\n", "in a chunk's data"),
    (b"3\r\n", "after a chunk"),
    (b"xyz\r\n0\r\n", "after a second chunk's header"),
    (b"X-Trailer: 1\r\n", "after the last chunk's header"),
    (b"\r\n", "in the trailers"),
    (SIZED[:20], "after a message"),
    (SIZED[20:] + b"abc", "in a second request's head"),
    (b"def", "in a body of a known length"),
    (CHUNKED + b"4\r\nabcd\r\n0\r\n\r\n", "after a second message"),
]


def test_data_received_and_in_head_agree_on_every_state_a_read_meets() -> None:
    counted: list[bytes] = []

    class Watched(JsonErrorsProtocol):  # what data_received counts as a head's read
        def head_received(self, data: bytes) -> Any:
            counted.append(data)
            return super().head_received(data)

    async def go() -> set[bool]:
        config = Config(_app, http=Watched, log_level="warning", access_log=False)
        config.load()
        protocol = Watched(config=config, server_state=ServerState(), app_state={})
        protocol.connection_made(_Transport())
        seen = set()
        try:
            for data, state in READS:
                in_head = protocol.in_head()
                protocol.data_received(data)
                assert (counted[-1:] == [data]) == in_head, state
                seen.add(in_head)
                counted.clear()
                await asyncio.sleep(0)  # the app answers what came whole
                await asyncio.sleep(0)
        finally:
            protocol.connection_lost(None)
        return seen

    assert asyncio.run(go()) == {True, False}
