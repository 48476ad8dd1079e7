"""The protocol's hot path calls its bases by name (`super()` costs 0.15 us a call on Python
3.11): a layer between (app/cli/stalls.py, app/cli/headers.py) that came to define one of those
callbacks would be skipped without a sign. The calls are found in the source (a list kept by
hand let a new one go unchecked): `Base.method(self, ...)`, or `alias(self, ...)` for a
module's `alias = Base.method`, inside a class whose MRO holds Base."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import app.cli

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
    for path in sorted(CLI.glob("*.py")):
        module = importlib.import_module(f"app.cli.{path.stem}")
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
                    where = f"{path.name}:{call.lineno} {cls.__name__}"
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
