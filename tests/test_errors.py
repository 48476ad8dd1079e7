"""The names errors go by: a class's own, or the wire name it declares."""

from __future__ import annotations

import builtins
import importlib
import pkgutil

import app
from app.errors import AppError, MethodNotImplemented, ValidationFailed
from tests.error_names import app_errors


def every_app_error() -> list[type[AppError]]:
    """Every AppError subclass in app/: a class is found only once its module is imported, and
    this file alone imported 28 of 53 (MCP's, the protocol's and the migrations' not among them)."""
    for module in pkgutil.walk_packages(app.__path__, "app."):
        importlib.import_module(module.name)
    return app_errors()


def test_no_error_class_shadows_a_builtin() -> None:
    # `class NotImplemented(AppError)` hid the builtin constant in every module importing it.
    shadowing = {cls.__name__ for cls in every_app_error()} & set(dir(builtins))

    assert shadowing == set()


def test_an_error_is_sent_by_its_class_name_unless_it_declares_a_wire_name() -> None:
    assert MethodNotImplemented("no CONNECT").error == "NotImplemented"
    assert ValidationFailed("x").error == "ValidationFailed"
    names = [cls.wire_name for cls in every_app_error()]
    assert len(names) == len(set(names)), "two errors answer under one name"
