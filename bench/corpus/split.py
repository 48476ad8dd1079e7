"""The labelled set's fixed dev/test split: tune on dev, report test as the honest figure.

Each query's id is its text. Within each kind the queries are ordered by a SHA-256 of that id
and dealt alternately to dev and test, so the halves are stratified by kind (equal up to one
query per kind), never depend on the order of `QUERIES`, and a query keeps its half when others
are added.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

Half = Literal["dev", "test"]
HALVES: tuple[Half, ...] = ("dev", "test")


def query_key(query: str) -> str:
    """A stable hash of the query's id (its text)."""
    return hashlib.sha256(query.encode("utf-8")).hexdigest()


def split(queries: Sequence[tuple[str, str, list[str]]]) -> list[Half]:
    """The half of each query, in the order given."""
    by_kind: dict[str, list[int]] = defaultdict(list)
    for index, (kind, _query, _) in enumerate(queries):
        by_kind[kind].append(index)
    halves: list[Half] = ["dev"] * len(queries)
    for indexes in by_kind.values():
        ordered = sorted(indexes, key=lambda i: query_key(queries[i][1]))
        for position, index in enumerate(ordered):
            halves[index] = HALVES[position % 2]
    return halves
