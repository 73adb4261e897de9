"""API errors: one JSON shape, one status code per kind of failure."""

from __future__ import annotations

from ocrforge.io.inputs import InputError

# InputError.kind -> (HTTP status, error kind reported to the client)
_INPUT_STATUS = {
    "empty": (400, "empty_input"),
    "corrupt": (400, "corrupt_input"),
    "unsupported": (415, "unsupported_media_type"),
    "too_many_pixels": (422, "too_many_pixels"),
    "too_many_pages": (422, "too_many_pages"),
    "too_small": (422, "image_too_small"),
}


class ApiError(Exception):
    """An error answered as ``{"error": {"status", "kind", "message", "request_id"}}``."""

    def __init__(self, status: int, kind: str, message: str,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.headers = headers or {}

    def body(self, request_id: str | None) -> dict:
        return {"error": {"status": self.status, "kind": self.kind, "message": self.message,
                          "request_id": request_id}}


def from_input_error(e: InputError) -> ApiError:
    status, kind = _INPUT_STATUS.get(getattr(e, "kind", "corrupt"), (400, "corrupt_input"))
    return ApiError(status, kind, str(e))
