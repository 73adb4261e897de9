"""Upload decoding for the server, in two steps.

1. ``probe``: the kind, the page count and each page's size, read from headers (PDF: the page
   boxes, nothing rendered). Admission is decided on this.
2. ``PageStream``: the pages themselves, one at a time, from the engine's decode step
   (``engine.decode``, the engine's limits), so a request never holds more decoded pages than
   the batcher has page slots for. ``EncodedPages`` instead hands a one-page JPEG or PNG on
   as its bytes, for an engine that decodes where it reads (``--engine-process``: the child).

PDFium is not thread-safe, not even across documents: every call into it made here holds
``PDFIUM_LOCK`` (each PDF page is rendered under the lock, other work runs in parallel).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass

from PIL import Image

from ocrforge.io.inputs import InputError, PageImage, describe, sniff
from ocrforge.server.errors import ApiError, from_input_error

PDFIUM_LOCK = threading.Lock()
_MULTI_FRAME = ("tiff", "gif", "webp")
ENCODED_KINDS = ("jpeg", "png")  # one frame always: handed on undecoded where the engine can


@dataclass
class Probe:
    kind: str  # as sniffed: png, jpeg, pdf, ..., "unknown" or "empty"
    sizes: list[tuple[int, int]]  # (width, height) of each page; (0, 0) where unknown
    pages: int = 0  # the document's page count where known (PDF), else len(sizes)


def is_pdf(data: bytes) -> bool:
    return sniff(data) == "pdf" if data else False


def probe(data: bytes, *, dpi: int, max_pages: int) -> Probe:
    """Kind, pages and page sizes without decoding pixels. Never raises: when the headers
    cannot be read, one page of unknown size is assumed and the decode step will name the
    problem. At most ``max_pages + 1`` pages are listed (more is an error at decode)."""
    kind = sniff(data) if data else "empty"
    sizes: list[tuple[int, int]] = []
    pages = 0
    try:
        if kind == "pdf":
            sizes, pages = _pdf_sizes(data, dpi, max_pages + 1)
        elif kind not in ("unknown", "empty"):
            sizes = _image_sizes(data, kind, max_pages + 1)
    except Exception:  # hostile or broken headers: the decode step reports them
        sizes = []
    sizes = sizes or [(0, 0)]
    return Probe(kind, sizes, max(pages, len(sizes)))


def _pdf_sizes(data: bytes, dpi: int, limit: int) -> tuple[list[tuple[int, int]], int]:
    """Sizes of the first ``limit`` pages, and the page count."""
    import pypdfium2 as pdfium

    with PDFIUM_LOCK:
        doc = pdfium.PdfDocument(data)
        try:
            scale = dpi / 72.0
            out = []
            for i in range(min(len(doc), limit)):
                w, h = doc.get_page_size(i)
                out.append((int(round(w * scale)), int(round(h * scale))))
            return out, len(doc)
        finally:
            doc.close()


def _image_sizes(data: bytes, kind: str, limit: int) -> list[tuple[int, int]]:
    with Image.open(io.BytesIO(data)) as img:
        frames = getattr(img, "n_frames", 1) if kind in _MULTI_FRAME else 1
        return [img.size] * min(frames, limit)


class PageStream:
    """Pages of one upload from a lazy decode iterator; ``next()`` and ``close()`` may run in
    any thread (one at a time: they share a lock) and map decode failures to 4xx ApiErrors
    that name the upload."""

    def __init__(self, pages: Iterator[PageImage], data: bytes, kind: str, source: str):
        self._it = pages
        self._lock = threading.Lock()
        self._pdf = kind == "pdf"
        self._anon = describe(data)  # how the decode step names bytes, replaced by ``source``
        self.kind = kind
        self.source = source

    def _guard(self):
        return PDFIUM_LOCK if self._pdf else nullcontext()

    def next(self) -> PageImage | None:
        """The next page, or None after the last."""
        try:
            with self._lock, self._guard():
                page = next(self._it, None)
        except InputError as e:
            raise self._named(from_input_error(e)) from None
        except Exception as e:  # a decoder failing on hostile data is still bad input
            raise ApiError(400, "corrupt_input", f"{self.source}: cannot decode {self.kind} "
                           f"({type(e).__name__}: {e})") from None
        if page is not None:
            page.source = self.source
        return page

    def close(self) -> None:
        with self._lock, self._guard():
            self._it.close()  # type: ignore[attr-defined]

    def _named(self, err: ApiError) -> ApiError:
        if err.message.startswith(self._anon):
            err.message = self.source + err.message[len(self._anon):]
            err.args = (err.message,)
        return err


@dataclass
class EncodedPage:
    """A one-page upload still encoded. The engine that reads it decodes it (with the same
    limits and EXIF handling as ``engine.decode``)."""

    source: str
    index: int
    image: bytes


class EncodedPages:
    """``PageStream``'s interface over one encoded page: nothing is decoded here."""

    def __init__(self, data: bytes, source: str):
        self._page: EncodedPage | None = EncodedPage(source, 0, data)

    def next(self) -> EncodedPage | None:
        page, self._page = self._page, None
        return page

    def close(self) -> None:
        self._page = None
