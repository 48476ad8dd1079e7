"""The protocol's hot path calls its bases by name (`super()` costs 0.15 us a call on Python
3.11): a layer between (app/cli/stalls.py, app/cli/headers.py) that came to define one of those
callbacks would be skipped without a sign."""

from __future__ import annotations

import httptools
import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.cli.headers import HeaderBoundProtocol
from app.cli.stalls import StallBoundProtocol
from app.cli.wire import JsonErrorsProtocol, RefusingParser

# What each class calls by name, and the class it names.
CALLED_BY_NAME = [
    (JsonErrorsProtocol, "data_received", HttpToolsProtocol),
    (JsonErrorsProtocol, "on_headers_complete", HttpToolsProtocol),
    (JsonErrorsProtocol, "on_response_complete", HttpToolsProtocol),
    (JsonErrorsProtocol, "on_message_begin", HeaderBoundProtocol),
    (HeaderBoundProtocol, "on_message_begin", HttpToolsProtocol),
    (StallBoundProtocol, "on_body", HttpToolsProtocol),
    (RefusingParser, "feed_data", httptools.HttpRequestParser),
]


@pytest.mark.parametrize(("cls", "name", "named"), CALLED_BY_NAME)
def test_no_layer_between_a_class_and_the_base_it_names_defines_the_callback(
    cls: type, name: str, named: type
) -> None:
    between = cls.__mro__[1 : cls.__mro__.index(named)]
    assert [base.__name__ for base in between if name in vars(base)] == []
