"""Errors of the capture API; the class name is the `error` field a client sees."""

from __future__ import annotations

from app.errors import Conflict, NotFound, ValidationFailed


class SessionNotFound(NotFound):
    """No session has that id."""


class ObservationNotFound(NotFound):
    """No observation has that id."""


class SessionIdConflict(Conflict):
    """A session id was reused with a different body."""


class ObservationIdConflict(Conflict):
    """An observation id was reused with a different body, session or result."""


class PayloadTooDeep(ValidationFailed):
    """A JSON field nests deeper than AGMEM_CAPTURE_MAX_DEPTH."""
