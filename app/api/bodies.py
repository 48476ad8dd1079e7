"""JSON request bodies: camelCase on the wire (snake_case too), and one way to refuse unknowns.

The rule (docs/architecture.md, "Robustness"): every body refuses fields it does not know, except
the interceptor stream (`/api/session/start`, `/api/observe`, `/api/observe/result`,
`/api/session/end`), which interceptors of other versions send with more than this one reads.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

from app.api.spellings import one_spelling
from app.privacy import surrogates_replaced


class CamelModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


def one_value_per_field(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """`data` with each field sent in both spellings kept once, under its camelCase name, with the
    value `one_spelling` takes (ValueError for two real values that differ)."""
    both = [
        (name, field.alias)
        for name, field in model.model_fields.items()
        if field.alias and field.alias != name and name in data and field.alias in data
    ]
    if not both:
        return data
    kept = dict(data)
    for name, alias in both:
        kept[alias] = one_spelling(alias, kept[alias], name, kept.pop(name))
    return kept


class SurrogatesReplaced(BaseModel):
    """A body whose strings have their lone surrogates replaced by U+FFFD before validation
    (`surrogates_replaced`): cleaned as stored text is, instead of a 422 "not a valid string".
    A field sent in both spellings is kept once (`one_value_per_field`)."""

    @model_validator(mode="before")
    @classmethod
    def _replace_surrogates(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = one_value_per_field(cls, data)
        return surrogates_replaced(data)


def unknown_fields_message(unknown: Iterable[str], known: list[str], noun: str = "field") -> str:
    """`unknown field 'tag' (did you mean 'tags'?); the fields are ...`: each unknown name with
    the known one it is closest to, if any is close (case aside). `noun`: what they are."""
    by_lower = {name.lower(): name for name in known}
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
        named.append(f"'{name}' (did you mean '{by_lower[close[0]]}'?)" if close else f"'{name}'")
    named_noun = noun if len(named) == 1 else f"{noun}s"
    return f"unknown {named_noun} {', '.join(named)}; the {noun}s are {', '.join(known)}"


class StrictBody(CamelModel):
    """A request body whose unknown fields are a 422 naming them, instead of being dropped.

    Dropped, a misspelt or guessed field did nothing and said nothing: `expiresAt` instead of
    `ttl` stored a memory that never expired. `echoed()` names fields that are not the body's
    but that our own answers carry, so a client that reads an object and sends it back is not
    refused; they are accepted and ignored. Both spellings (camelCase, snake_case) count, and
    both at once are kept once, two real values refused (`one_value_per_field`)."""

    # The schema says what a client may send (as `extra="forbid"` said for search and sync).
    model_config = ConfigDict(json_schema_extra={"additionalProperties": False})

    @classmethod
    def echoed(cls) -> frozenset[str]:
        return frozenset()

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data  # not an object: pydantic says so (app.api.errors words it)
        spellings = {name: field.alias or name for name, field in cls.model_fields.items()}
        known = set(spellings) | set(spellings.values())
        echoed = cls.echoed()
        unknown = [name for name in data if name not in known and name not in echoed]
        if unknown:
            raise ValueError(unknown_fields_message(unknown, list(spellings.values())))
        data = one_value_per_field(cls, data)
        # A lone surrogate is cleaned here as in `SurrogatesReplaced`, in the one pass.
        return surrogates_replaced({name: value for name, value in data.items() if name in known})
