"""A small client for ``ocrforge serve``.

>>> from ocrforge.client import Client
>>> with Client("http://127.0.0.1:8000") as c:
...     result = c.ocr("receipt.jpg")          # path, bytes or file object
...     print(result["text"])

``ocr()`` returns the server's JSON envelope (schema ``ocrforge.response/1``): request_id,
pages (each a ``Page.to_dict()``), text, timings_ms, batch. Errors raise OCRServerError
with the server's status, kind and message. 429 and 503 answers are retried after the
server's Retry-After (``retries`` times).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import IO, Any

import httpx


class OCRServerError(RuntimeError):
    """The server answered with an error (status, kind and message from its JSON body)."""

    def __init__(self, status: int, kind: str, message: str, request_id: str | None = None):
        super().__init__(f"HTTP {status} {kind}: {message}")
        self.status = status
        self.kind = kind
        self.message = message
        self.request_id = request_id


class Client:
    """Synchronous client; thread-safe (one httpx connection pool)."""

    def __init__(self, url: str = "http://127.0.0.1:8000", api_key: str | None = None, *,
                 timeout: float = 120.0, retries: int = 2):
        self.url = url.rstrip("/")
        key = api_key if api_key is not None else os.environ.get("OCRFORGE_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.retries = retries
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def ocr(self, item: str | os.PathLike[str] | bytes | IO[bytes], *, format: str = "json",
            det_limit: int | None = None, cls: bool | None = None,
            timeout: float | None = None) -> Any:
        """OCR one image or PDF. format="json" returns a dict, "text"/"markdown" a str."""
        name, data = _read(item)
        params: dict[str, Any] = {"format": format}
        if det_limit is not None:
            params["det_limit"] = det_limit
        if cls is not None:
            params["cls"] = "true" if cls else "false"
        if timeout is not None:
            params["timeout"] = timeout
        for attempt in range(self.retries + 1):
            r = self._http.post("/v1/ocr", params=params,
                                files={"file": (name, data, "application/octet-stream")})
            if r.status_code in (429, 503) and attempt < self.retries:
                time.sleep(min(float(r.headers.get("Retry-After", "1") or 1), 30.0))
                continue
            break
        if r.status_code != 200:
            raise _error(r)
        return r.json() if format == "json" else r.text

    def ready(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until /readyz answers 200 (models loaded and warmed)."""
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.url} not ready within {timeout:g} s")
            time.sleep(0.2)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read(item: str | os.PathLike[str] | bytes | IO[bytes]) -> tuple[str, bytes]:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return "upload", bytes(item)
    if isinstance(item, (str, os.PathLike)):
        p = Path(item)
        return p.name, p.read_bytes()
    return Path(getattr(item, "name", "upload")).name, item.read()


def _error(r: httpx.Response) -> OCRServerError:
    try:
        e = r.json()["error"]
        return OCRServerError(r.status_code, e["kind"], e["message"], e.get("request_id"))
    except Exception:
        return OCRServerError(r.status_code, "http_error", r.text[:500])
