"""The check that every error a surface sends is named by a class of app/errors.py: a name
written as a string in one surface drifts from the others on the first rename."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from app.errors import AppError, HTTPError


def _subclasses(cls: type[AppError]) -> Iterator[type[AppError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def app_errors() -> list[type[AppError]]:
    """Every error class a client may see named."""
    return list(_subclasses(AppError))


def assert_named_by_its_class(status: int, answer: Mapping[str, Any]) -> None:
    """`answer` (an error's JSON) names an AppError subclass whose status is `status`."""
    classes = {cls.wire_name: cls for cls in app_errors()}
    name = answer["error"]
    assert name in classes, f"{name!r} is the name of no AppError subclass"
    if classes[name] is not HTTPError:  # the framework's error of a status we do not name
        assert classes[name].status_code == status, f"{name} sent with {status}"
