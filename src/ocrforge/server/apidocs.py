"""``/docs`` (Swagger UI) and ``/redoc`` served from local files, never from a CDN, so the API
docs work on a machine without internet access.

The JavaScript and CSS come from the ``fastapi-offline`` package (part of the ``serve`` extra),
which ships the swagger-ui-dist and ReDoc bundles; they are mounted under ``ASSETS_PATH``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_PATH = "/docs-assets"
ASSET_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")


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
        return get_redoc_html(openapi_url=openapi, title=f"{app.title} - API docs",
                              redoc_js_url=f"{assets}/redoc.standalone.js",
                              redoc_favicon_url=f"{assets}/favicon.png", with_google_fonts=False)
