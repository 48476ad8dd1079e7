"""A field sent under both its spellings (camelCase, snake_case): one rule, bodies and queries.

Pydantic, and the query parameters before, took the camelCase one and dropped the other without
a word, so a client that merged objects of both styles filed its data under whichever spelling
won: `DELETE /api/memories/k?projectPath=/a&project_path=/b` deleted `/a`'s memory. Only two
real values that differ are refused. A null or blank spelling says nothing (clients send
`"project_path": null` beside the camelCase one), and two spellings of one folder (`/a/`, `/a`;
`C:\\x`, `c:/x`) are one project once folded as the stored project is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.privacy import clean_text
from app.projects import canonical_project

# The fields (snake_case names) that hold a project path, folded by `canonical_project`.
PROJECT_FIELDS = frozenset({"project_path"})


def meaning(snake_name: str, value: Any) -> Any:
    """What a spelling's value means for the comparison; None when it says nothing. A string is
    cleaned and trimmed, a project path folded as the stored project is."""
    if not isinstance(value, str):
        return value
    text = clean_text(value).strip()  # NUL-only is blank once cleaned
    if text and snake_name in PROJECT_FIELDS:
        return canonical_project(text)
    return text or None


def one_spelling(camel_name: str, camel: Any, snake_name: str, snake: Any) -> Any:
    """The value of a field sent as `camel` and `snake` (None: null or not sent): the one that is
    not null or blank (`one_value`: when both are real and spelt apart, what they mean).
    Raise ValueError when both are real and differ."""
    return one_value(camel_name, [camel], snake_name, [snake])


def one_value(
    camel_name: str, camels: Sequence[Any], snake_name: str, snakes: Sequence[Any]
) -> Any:
    """`one_spelling` for a field whose spellings may each come more than once (a query's
    `?projectPath=/a&projectPath=/b`, which FastAPI resolves to the last): every real value must
    mean the same (ValueError naming the field otherwise). That value is returned as sent, or,
    when real values are spelt apart (`"s"`, `"s "`), as it means: then the value kept does
    not hang on which spelling came first."""
    kept: tuple[str, Any, Any] | None = None  # (spelling, value, what it means)
    spelt_apart = False
    for name, value in [(camel_name, v) for v in camels] + [(snake_name, v) for v in snakes]:
        meant = meaning(snake_name, value)
        if meant is None:
            continue
        if kept is None:
            kept = (name, value, meant)
        elif meant != kept[2]:
            if name != kept[0]:
                raise ValueError(
                    f"'{camel_name}' and '{snake_name}' name one field and were sent with "
                    "different values; send one of them"
                )
            raise ValueError(f"'{name}' was sent more than once with different values; send one")
        spelt_apart = spelt_apart or value != kept[1]
    if kept is not None:
        return kept[2] if spelt_apart else kept[1]
    return next((v for v in [*camels, *snakes] if v is not None), None)
