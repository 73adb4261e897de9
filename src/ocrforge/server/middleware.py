"""ASGI middleware around every route: request id, Host check, API key, security headers,
metrics, a JSON 500."""

from __future__ import annotations

import base64
import hmac
import logging
import re
import time
import uuid

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ocrforge.server.errors import ApiError
from ocrforge.server.guards import host_allowed, security_headers
from ocrforge.server.service import ServiceState

log = logging.getLogger("ocrforge.server")

PUBLIC_PATHS = {"/healthz", "/readyz"}
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


def json_error(err: ApiError, request_id: str | None) -> JSONResponse:
    return JSONResponse(err.body(request_id), status_code=err.status, headers=err.headers)


def authorized(headers: Headers, key: str | None) -> bool:
    """The request carries ``key`` (Bearer, X-API-Key, or Basic with the key as password)."""
    if not key:
        return True
    given = headers.get("x-api-key")
    auth = headers.get("authorization", "")
    if given is None and auth[:7].lower() == "bearer ":
        given = auth[7:].strip()
    elif given is None and auth[:6].lower() == "basic ":
        try:  # browsers: any user name, the key as password
            given = base64.b64decode(auth[6:].strip()).decode("utf-8").partition(":")[2]
        except Exception:
            given = None
    return given is not None and hmac.compare_digest(given.encode(), key.encode())


class ServiceMiddleware:
    """Request id, Host check, API key, security headers, metrics, and a JSON 500 for
    anything unexpected."""

    def __init__(self, app: ASGIApp, state: ServiceState):
        self.app = app
        self.state = state
        self.allowed_hosts = frozenset(h.strip().lower().rstrip(".")
                                       for h in state.settings.allowed_hosts)

    def _refusal(self, path: str, headers: Headers) -> ApiError | None:
        if not host_allowed(headers.get("host"), self.allowed_hosts):
            return ApiError(400, "invalid_host", "Host header not allowed: this server answers "
                            "to localhost, IP addresses and the names given with --allow-host")
        if path not in PUBLIC_PATHS and not authorized(headers, self.state.settings.api_key):
            return ApiError(401, "unauthorized", "missing or wrong API key: send it as "
                            "'Authorization: Bearer KEY' or 'X-API-Key: KEY'",
                            {"WWW-Authenticate": 'Basic realm="ocrforge", charset="UTF-8"'})
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        headers = Headers(scope=scope)
        rid = headers.get("x-request-id", "")
        if not _REQUEST_ID.match(rid):
            rid = uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        path = scope.get("path", "")
        status = [500]
        started = [False]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                started[0] = True
                out = MutableHeaders(scope=message)
                out["X-Request-ID"] = rid
                for k, v in security_headers(path).items():
                    out.setdefault(k, v)
            await send(message)

        metrics = self.state.metrics
        try:
            err = self._refusal(path, headers)
            if err is not None:
                metrics.errors.labels(err.kind).inc()
                await json_error(err, rid)(scope, receive, send_wrapper)
                return
            await self.app(scope, receive, send_wrapper)
        except Exception:
            log.exception("unhandled error in %s (request %s)", path, rid)
            metrics.errors.labels("internal").inc()
            if not started[0]:
                err = ApiError(500, "internal", "internal server error; the log has details "
                               f"under request id {rid}")
                await json_error(err, rid)(scope, receive, send_wrapper)
        finally:
            metrics.observe_http(path, status[0], time.perf_counter() - t0)
