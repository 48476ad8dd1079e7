"""The peer of the capture benchmark: FastAPI endpoints that parse the same bodies and do nothing.

They validate with the capture schemas, so the ratio measured against them is the cost of what
capture adds (cleaning, deriving, the database), not of HTTP and JSON parsing.
"""

from __future__ import annotations

import uuid

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from app.capture.schemas import ObserveIn, ObserveResultIn

app = FastAPI()


@app.get("/ready")
async def ready() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@app.post("/api/observe")
async def observe(data: ObserveIn) -> JSONResponse:
    return JSONResponse({"id": data.id or uuid.uuid4().hex, "status": "pending"}, status_code=201)


@app.post("/api/observe/result")
async def observe_result(data: ObserveResultIn) -> JSONResponse:
    return JSONResponse({"id": data.observation_id, "status": "captured"})
