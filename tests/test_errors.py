"""The names errors go by: a class's own, or the wire name it declares."""

from __future__ import annotations

import builtins

from app.errors import MethodNotImplemented, ValidationFailed
from tests.error_names import app_errors


def test_no_error_class_shadows_a_builtin() -> None:
    # `class NotImplemented(AppError)` hid the builtin constant in every module importing it.
    shadowing = {cls.__name__ for cls in app_errors()} & set(dir(builtins))

    assert shadowing == set()


def test_an_error_is_sent_by_its_class_name_unless_it_declares_a_wire_name() -> None:
    assert MethodNotImplemented("no CONNECT").error == "NotImplemented"
    assert ValidationFailed("x").error == "ValidationFailed"
    names = [cls.wire_name for cls in app_errors()]
    assert len(names) == len(set(names)), "two errors answer under one name"
