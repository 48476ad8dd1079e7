"""API.md's rule on times applies to every time a request sends, filters included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from app.api.times import check_time

_SOON = datetime.now(UTC) + timedelta(days=2)
REFUSED = [
    ("1960-01-01T00:00:00Z", "before 1970"),
    ("-1", "before 1970"),  # epoch seconds, as pydantic reads a number
    ("1969-12-31T23:59:59-01:00", None),  # 00:59:59 UTC on 1 January 1970: accepted
    # An id of its own: one taken from the time would differ between pytest-xdist's workers,
    # which then refuse to run (each collects the tests and they must agree).
    pytest.param(_SOON.isoformat(), "more than a day in the future", id="in two days"),
    # No UTC datetime exists for it: converting first was an OverflowError, a 500.
    ("9999-12-31T23:59:59-05:00", "more than a day in the future"),
]


@pytest.mark.parametrize(("value", "refusal"), REFUSED)
def test_list_and_search_time_filters_follow_the_timestamp_rule(
    client: TestClient, value: str, refusal: str | None
) -> None:
    listed = client.get("/api/sessions", params={"before": value})
    number = int(value) if value.lstrip("-").isdigit() else value
    searched = client.post("/api/search", json={"query": "pool", "since": number})
    until = client.post("/api/search", json={"query": "pool", "until": number})

    for response in (listed, searched, until):
        if refusal is None:
            assert response.status_code == 200, response.text
        else:
            assert response.status_code == 422, response.text
            assert response.json()["error"] == "ValidationFailed"
            assert refusal in response.json()["detail"]


def test_a_time_without_an_offset_is_utc() -> None:
    assert check_time(datetime(2026, 1, 2, 3, 4)) == datetime(2026, 1, 2, 3, 4, tzinfo=UTC)
    assert check_time(datetime.fromisoformat("2026-01-02T05:04:00+02:00")) == datetime(
        2026, 1, 2, 3, 4, tzinfo=UTC
    )


@pytest.mark.parametrize("sent", ["2026-11-27T10:00:00 05:00", "2026-11-27T10:00:00.5 0530"])
def test_an_offset_whose_plus_the_url_made_a_space_says_so(client: TestClient, sent: str) -> None:
    # `?before=2026-11-27T10:00:00+05:00` unencoded: the `+` arrives as a space, and the 422
    # said only "unexpected extra characters at the end of the input".
    response = client.get("/api/sessions", params={"before": sent})

    assert response.status_code == 422
    assert response.json() == {
        "error": "ValidationFailed",
        "detail": f"query.before: {sent!r} has a space where the offset's sign goes (a URL's"
        " query turns '+' into one; send %2B or Z)",
    }


def test_an_offset_given_a_space_in_a_json_body_does_not_blame_the_url(
    client: TestClient,
) -> None:
    # The message said "a '+' in a URL's query is read as a space" of a JSON body's time too,
    # where no URL was involved.
    sent = "2026-11-27T10:00:00 05:00"
    response = client.post("/api/search", json={"query": "pool", "since": sent})

    assert response.status_code == 422
    assert response.json() == {
        "error": "ValidationFailed",
        "detail": f"since: {sent!r} has a space where the offset's sign goes (a URL's query"
        " turns '+' into one; send %2B or Z)",
    }
