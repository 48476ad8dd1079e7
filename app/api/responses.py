"""JSON answers whose stored jsonb numbers are written exactly."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from app import exactjson


class ExactJSONResponse(JSONResponse):
    """JSONResponse's bytes, and an integer of more than 4,300 digits (in a jsonb stored by SQL
    or an older build, read back by `exactjson.loads_stored`) written too: `json.dumps` raised
    on it, and the read was a 500."""

    def render(self, content: object) -> bytes:
        text = exactjson.dumps(
            content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
        )
        return text.encode("utf-8")
