"""Reading an upload: a multipart form (field ``file`` plus options) or a raw body, bounded
per request (413) and over all requests (the server-wide byte budget, 429); and the request's
options, checked with a clear message each."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartParser

from ocrforge.server.admission import ByteBudget
from ocrforge.server.errors import ApiError
from ocrforge.server.formats import FORMATS
from ocrforge.server.settings import ServerSettings

FORM_FIELDS = {"file", "format", "det_limit", "cls", "timeout"}
_SAFE_NAME = re.compile(r"[^\w.\- ()\[\]+,@]")


def safe_name(name: str | None) -> str:
    if not name:
        return "upload"
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = _SAFE_NAME.sub("_", name)[:120].strip()
    return name or "upload"


class UploadHold:
    """Upload bytes this request holds in the server-wide budget, taken as they arrive
    (429 when they do not fit, or when an older upload needed them: see ByteBudget)."""

    def __init__(self, budget: ByteBudget, retry_after: int):
        self.budget = budget
        self.retry_after = retry_after
        self.share = budget.open()

    @property
    def held(self) -> int:
        return self.share.held

    def _refused(self) -> ApiError:
        return ApiError(429, "overloaded", f"uploads in flight hold the server's limit of "
                        f"{self.budget.limit:,} bytes; retry after {self.retry_after} s",
                        {"Retry-After": str(self.retry_after), "Connection": "close"})

    def take(self, n: int) -> None:
        if not self.budget.take(self.share, n):
            raise self._refused()

    def received(self) -> None:
        if not self.budget.received(self.share):
            raise self._refused()

    def release(self) -> None:
        self.budget.release(self.share)


DRAIN_S = 1.0  # how long a refused body is read and dropped before the answer


async def _drain(stream: AsyncIterator[bytes], cap: int) -> None:
    """Read and drop the rest of a body (up to ``cap`` bytes and ``DRAIN_S`` seconds), so a
    client still sending can read our answer; a slow one gets it after DRAIN_S at most."""
    n = 0
    try:
        async with asyncio.timeout(DRAIN_S):
            async for more in stream:
                n += len(more)
                if n > cap:
                    break
    except TimeoutError:
        pass


async def _limited(stream: AsyncIterator[bytes], limit: int,
                   hold: UploadHold | None = None) -> AsyncIterator[bytes]:
    n = 0
    async for chunk in stream:
        n += len(chunk)
        if hold is not None and n > hold.held:
            try:
                hold.take(n - hold.held)
            except ApiError:
                await _drain(stream, 4 * limit)
                raise
        if n > limit:
            await _drain(stream, 4 * limit)
            raise ApiError(413, "payload_too_large",
                           f"upload is over the server's limit of {limit:,} bytes",
                           {"Connection": "close"})
        yield chunk
    if hold is not None:
        hold.received()  # 429 if an older upload took its bytes back meanwhile


async def read_upload(request: Request, limit: int,
                      hold: UploadHold | None = None) -> tuple[bytes, str, dict[str, str]]:
    """(data, source name, form fields) from a multipart upload or a raw body; the bytes are
    taken from ``hold``'s budget as they arrive (not as Content-Length announces them: a slow
    client announcing a large body must not hold the budget it has not sent)."""
    clen = request.headers.get("content-length", "")
    if clen.isdigit() and int(clen) > limit:
        # answered at once (a client waiting for 100-continue has sent nothing), else after
        # at most DRAIN_S of reading, and the connection closed: never the request timeout
        if "100-continue" not in request.headers.get("expect", "").lower():
            await _drain(request.stream(), 4 * limit)
        raise ApiError(413, "payload_too_large", f"upload of {int(clen):,} bytes is over the "
                       f"server's limit of {limit:,} bytes", {"Connection": "close"})
    ctype = request.headers.get("content-type", "").lower()
    stream = _limited(request.stream(), limit, hold)
    if not ctype.startswith("multipart/form-data"):
        # any other body is the file itself (curl --data-binary sends form-urlencoded)
        data = b"".join([c async for c in stream])
        return data, "upload", {}
    parser = MultiPartParser(request.headers, stream, max_files=1, max_fields=len(FORM_FIELDS),
                             max_part_size=64 * 1024)
    try:
        form = await parser.parse()
    except ApiError:
        raise
    except Exception as e:
        raise ApiError(400, "bad_request", f"malformed multipart body ({e})") from None
    try:
        fields: dict[str, str] = {}
        upload: UploadFile | None = None
        for name, value in form.multi_items():
            if name not in FORM_FIELDS:
                raise ApiError(400, "bad_request", f"unknown form field {name!r}; expected "
                               f"{', '.join(sorted(FORM_FIELDS))}")
            if name == "file":
                if not isinstance(value, UploadFile):
                    raise ApiError(400, "bad_request", "form field 'file' must be a file upload "
                                   "(the server never reads paths or fetches URLs)")
                upload = value
            elif isinstance(value, str):
                fields[name] = value
            else:
                raise ApiError(400, "bad_request", f"form field {name!r} must be a plain value")
        if upload is None:
            raise ApiError(400, "bad_request", "no file: send the image or PDF as multipart "
                           "field 'file' or as the raw request body")
        data = await upload.read()
        return data, safe_name(upload.filename), fields
    finally:
        await form.close()


def request_options(fields: dict[str, str], fmt: str | None, det_limit: int | None, cls: bool | None,
             timeout: float | None, s: ServerSettings) -> tuple[str, int | None, bool | None, float]:
    """Query parameters win over form fields; every value checked with a clear message."""
    def bad(name: str, msg: str) -> ApiError:
        return ApiError(400, "invalid_parameter", f"parameter {name!r}: {msg}")

    if fmt is None:
        fmt = fields.get("format", "json").strip().lower() or "json"
    if fmt == "md":
        fmt = "markdown"
    if fmt not in FORMATS:
        raise bad("format", f"must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if det_limit is None and fields.get("det_limit", "").strip():
        try:
            det_limit = int(fields["det_limit"])
        except ValueError:
            raise bad("det_limit", f"must be an integer, not {fields['det_limit']!r}") from None
    if det_limit is not None and not 32 <= det_limit <= s.max_det_limit:
        raise bad("det_limit", f"must be between 32 and {s.max_det_limit}, not {det_limit}")
    if cls is None and fields.get("cls", "").strip():
        v = fields["cls"].strip().lower()
        if v not in ("1", "0", "true", "false", "on", "off", "yes", "no"):
            raise bad("cls", f"must be on or off, not {fields['cls']!r}")
        cls = v in ("1", "true", "on", "yes")
    if timeout is None and fields.get("timeout", "").strip():
        try:
            timeout = float(fields["timeout"])
        except ValueError:
            raise bad("timeout", f"must be a number of seconds, not {fields['timeout']!r}") from None
    if timeout is not None and not timeout > 0:
        raise bad("timeout", "must be > 0 seconds")
    limit = s.request_timeout_s if timeout is None else min(timeout, s.request_timeout_s)
    return fmt, det_limit, cls, limit
