"""``/docs`` (Swagger UI) and ``/redoc`` served from local files, never from a CDN, so the API
docs work on a machine without internet access.

The JavaScript and CSS come from the ``fastapi-offline`` package (part of the ``serve`` extra),
which ships the swagger-ui-dist and ReDoc bundles; they are mounted under ``ASSETS_PATH``. The
ReDoc bundle draws its "API docs by Redocly" logo from cdn.redoc.ly; it is served from
``REDOC_JS`` with that one URL replaced by an inline image.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

ASSETS_PATH = "/docs-assets"
ASSET_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
REDOC_JS = "/docs-redoc.standalone.js"
_CDN_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
_NO_LOGO = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/%3E"


def assets_dir() -> Path | None:
    """The folder holding the Swagger UI / ReDoc bundles, or None if not installed."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(next(iter(spec.submodule_search_locations))) / "static"
    return d if all((d / f).is_file() for f in ASSET_FILES) else None


_MISSING = """<!doctype html><html><head><title>{title} - API docs</title></head><body>
<h1>API docs unavailable</h1><p>The Swagger UI files are not installed on this server:
<code>pip install 'ocrforge[serve]'</code> (package <code>fastapi-offline</code>).
The OpenAPI schema is at <a href="{openapi}">{openapi}</a>.</p></body></html>"""


@lru_cache(maxsize=1)
def _redoc_bundle(folder: Path) -> bytes:
    js = (folder / "redoc.standalone.js").read_text(encoding="utf-8")
    return js.replace(_CDN_LOGO, _NO_LOGO).encode("utf-8")


def add_offline_docs(app: FastAPI) -> None:
    """Routes ``/docs`` and ``/redoc`` on an app created with docs_url=None, redoc_url=None."""
    folder = assets_dir()
    if folder is not None:
        app.mount(ASSETS_PATH, StaticFiles(directory=folder), name="docs-assets")

    def urls(request: Request) -> tuple[str, str]:
        root = request.scope.get("root_path", "").rstrip("/")
        return root + (app.openapi_url or "/openapi.json"), root + ASSETS_PATH

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        openapi, assets = urls(request)
        if folder is None:
            return HTMLResponse(_MISSING.format(title=app.title, openapi=openapi), status_code=503)
        return get_swagger_ui_html(
            openapi_url=openapi, title=f"{app.title} - API docs",
            swagger_js_url=f"{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{assets}/swagger-ui.css",
            swagger_favicon_url=f"{assets}/favicon.png",
            # no spec validator badge: it would send the schema to an online validator
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        openapi, assets = urls(request)
        if folder is None:
            return HTMLResponse(_MISSING.format(title=app.title, openapi=openapi), status_code=503)
        root = request.scope.get("root_path", "").rstrip("/")
        return get_redoc_html(openapi_url=openapi, title=f"{app.title} - API docs",
                              redoc_js_url=root + REDOC_JS,
                              redoc_favicon_url=f"{assets}/favicon.png", with_google_fonts=False)

    @app.get(REDOC_JS, include_in_schema=False)
    async def redoc_js() -> Response:
        if folder is None:
            return Response(status_code=404)
        return Response(_redoc_bundle(folder), media_type="text/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})
