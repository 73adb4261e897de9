"""The HTTP service: the FastAPI app, a shell over the engine, io and result.

Modules, in the order a request meets them: ``middleware`` (request id, API key, metrics),
``routes`` (the endpoints), ``ocr`` (the steps of ``POST /v1/ocr``), ``upload`` (reading the
body within its limits), ``admission`` (admit by work), ``batcher`` (pages of concurrent
requests into one engine call), ``formats`` (response bodies); ``service`` holds the state and
loads the engines.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from ocrforge.server.apidocs import add_offline_docs
from ocrforge.server.errors import ApiError
from ocrforge.server.middleware import ServiceMiddleware, json_error
from ocrforge.server.routes import STATIC_DIR, router
from ocrforge.server.service import ServiceState, load_engines
from ocrforge.server.settings import ServerSettings
from ocrforge.version import __version__


def _request_id(request: Request) -> str:
    return request.scope.get("state", {}).get("request_id", "")


def _lifespan(state: ServiceState):
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.decode_pool = ThreadPoolExecutor(state.settings.decode_threads,
                                               thread_name_prefix="ocrforge-decode")
        threading.Thread(target=load_engines, args=(state,), name="ocrforge-load",
                         daemon=True).start()
        try:
            yield
        finally:
            # uvicorn has already waited for in-flight requests; finish anything still queued
            if state.batcher is not None:
                await asyncio.to_thread(state.batcher.stop, 30.0)
            state.decode_pool.shutdown(wait=False, cancel_futures=True)
    return lifespan


def _add_error_handlers(app: FastAPI, state: ServiceState) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        state.metrics.errors.labels(exc.kind).inc()
        return json_error(exc, _request_id(request))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e.get("loc", ())[1:]) or "request"
            parts.append(f"parameter {loc!r}: {e.get('msg', 'invalid')}")
        err = ApiError(400, "invalid_parameter", "; ".join(parts))
        state.metrics.errors.labels(err.kind).inc()
        return json_error(err, _request_id(request))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        err = ApiError(exc.status_code, kind, str(exc.detail), dict(exc.headers or {}))
        return json_error(err, _request_id(request))


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """The ASGI app; engines load in a background thread at startup (see /readyz)."""
    settings = settings or ServerSettings()
    settings.validate()
    state = ServiceState(settings)
    app = FastAPI(
        title="ocrforge",
        version=__version__,
        description="Fast local OCR (Chinese and English). POST an image or PDF to /v1/ocr. "
        "Requests arriving together are batched into one engine call.",
        lifespan=_lifespan(state),
        docs_url=None,  # served from local files by add_offline_docs, never from a CDN
        redoc_url=None,
    )
    app.state.service = state
    app.add_middleware(ServiceMiddleware, state=state)
    add_offline_docs(app)
    _add_error_handlers(app, state)
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
