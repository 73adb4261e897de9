"""Turn paths, bytes, arrays and PIL images into BGR uint8 pages, with clear errors.

Every failure raises InputError naming the input. Pixel limits are checked from the
file header before any pixel is decoded, so a decompression bomb costs nothing.
"""

from __future__ import annotations

import io
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image, ImageOps, ImageSequence, UnidentifiedImageError

Image.MAX_IMAGE_PIXELS = None  # we enforce our own limit (max_pixels) with a clear error
# Pillow warns (UserWarning, with its site-packages path) about damaged but readable metadata,
# e.g. "Tag data larger than file": noise on stderr and in the server log for a page that
# reads fine; a page that does not read is an InputError naming it.
warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")

IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".gif", ".pbm", ".pgm", ".ppm"}
PDF_EXTS = {".pdf"}
MIN_SIDE = 2


class InputError(ValueError):
    """An input could not be read; the message names the input.

    ``kind`` classifies the failure for callers that map it (the HTTP server picks a status
    code from it): "corrupt" (default), "empty", "unsupported", "too_many_pixels",
    "too_many_pages", "too_small", "not_found".
    """

    def __init__(self, source: str, message: str, kind: str = "corrupt"):
        super().__init__(f"{source}: {message}")
        self.source = source
        self.reason = message
        self.kind = kind


@dataclass
class PageImage:
    """One decoded page: BGR uint8 HxWx3."""

    source: str
    index: int
    image: np.ndarray
    dpi: float | None = None  # render resolution of a PDF page
    rotation: int = 0  # set by page orientation: the input was this many degrees clockwise

    @property
    def height(self) -> int:
        return int(self.image.shape[0])

    @property
    def width(self) -> int:
        return int(self.image.shape[1])


@dataclass(frozen=True)
class PageSlice:
    """Pages ``first``..``last`` (0-based, inclusive) of a multi-page file: how one long PDF is
    shared out between engine processes. It reads, and is named, like the file itself (its
    pages keep their page numbers); a page range of the engine applies inside it too."""

    item: str | os.PathLike
    first: int
    last: int


def describe(item: Any) -> str:
    if isinstance(item, PageSlice):
        return describe(item.item)
    if isinstance(item, (str, os.PathLike)):
        return str(item)
    if isinstance(item, (bytes, bytearray, memoryview)):
        return f"<{len(item)} bytes>"
    if isinstance(item, np.ndarray):
        return f"<array {item.shape} {item.dtype}>"
    if isinstance(item, Image.Image):
        return f"<PIL image {item.size} {item.mode}>"
    return f"<{type(item).__name__}>"


def sniff(data: bytes) -> str:
    """Tell the container from its first bytes, never from a file name."""
    head = data[:16]
    if head.startswith(b"%PDF-") or b"%PDF-" in data[:1024]:
        return "pdf"
    if head.startswith(b"\x89PNG"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "tiff"
    if head.startswith(b"BM"):
        return "bmp"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:2] in (b"P1", b"P2", b"P3", b"P4", b"P5", b"P6"):
        return "pnm"
    return "unknown"


def iter_pages(
    item: Any,
    *,
    max_pixels: int = 80_000_000,
    pdf_dpi: int = 200,
    max_pdf_pages: int = 1000,
    source: str | None = None,
    rgb: bool = False,
    pages: str | None = None,
    skip: Callable[[int], bool] | None = None,
) -> Iterator[PageImage]:
    """Yield every page of an input: one for an image, one per frame/page for TIFF and PDF.

    ``rgb`` says a numpy array input is RGB (the default assumes BGR, OpenCV's order).
    ``pages`` selects pages of multi-page inputs ("1-5,8", 1-based); ``"-"`` reads stdin.
    ``skip(index)`` true: that page is left out without being rendered (a resumed job's done
    pages); unlike ``pages`` it does not change what the page limit counts.
    Pages are decoded one at a time, as they are consumed.
    """
    wanted = parse_page_range(pages) if pages else None
    yield from _iter_pages(item, max_pixels, pdf_dpi, max_pdf_pages, source, rgb, wanted, skip)


def _iter_pages(item: Any, max_pixels: int, pdf_dpi: int, max_pdf_pages: int,
                source: str | None, rgb: bool, wanted: Callable[[int], bool] | None,
                skip: Callable[[int], bool] | None = None) -> Iterator[PageImage]:
    if isinstance(item, PageImage):  # decoded already (a page handed on by a scheduler)
        yield item
        return
    if isinstance(item, PageSlice):
        inner, lo, hi = wanted, item.first, item.last

        def in_slice(i: int) -> bool:
            return lo <= i <= hi and (inner is None or inner(i))

        yield from _iter_pages(item.item, max_pixels, pdf_dpi, max_pdf_pages, source, rgb,
                               in_slice, skip)
        return
    if isinstance(item, str) and item == "-":
        source = source or "<stdin>"
        item = sys.stdin.buffer.read()
    name = source or describe(item)
    if isinstance(item, np.ndarray):
        yield PageImage(name, 0, _array_to_bgr(item, name, max_pixels, rgb))
        return
    if isinstance(item, Image.Image):
        _check_size(item.size, name, max_pixels)
        yield PageImage(name, 0, _pil_to_bgr(item, name))
        return
    if isinstance(item, (str, os.PathLike)):
        path = Path(item)
        if path.is_dir():
            raise InputError(name, "is a folder; pass the files in it (the CLI expands folders)")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError(name, "file not found", "not_found") from None
        except OSError as e:
            raise InputError(name, f"cannot read file ({e.strerror or e})") from None
    elif isinstance(item, (bytes, bytearray, memoryview)):
        data = bytes(item)
    else:
        raise InputError(name, "unsupported input type; pass a path, bytes, numpy array or PIL image",
                         "unsupported")

    if not data:
        raise InputError(name, "empty file (0 bytes)", "empty")
    kind = sniff(data)
    if kind == "pdf":
        yield from _pdf_pages(data, name, pdf_dpi, max_pixels, max_pdf_pages, wanted, skip)
        return
    if kind == "unknown":
        raise InputError(name, "not a supported image or PDF (unrecognised content)", "unsupported")
    for p in _image_pages(data, name, kind, max_pixels):
        if (wanted is None or wanted(p.index)) and not (skip and skip(p.index)):
            yield p


def parse_page_range(spec: str) -> Callable[[int], bool]:
    """"1-5,8,10-" (1-based, inclusive; open ends allowed) -> predicate on 0-based page index."""
    spans: list[tuple[int, float]] = []
    for part in spec.replace(" ", "").split(","):
        if not part:
            continue
        a, dash, b = part.partition("-")
        try:
            lo = int(a) if a else 1
            hi: float = (int(b) if b else float("inf")) if dash else lo
        except ValueError:
            raise ValueError(f"bad page range {spec!r}: use e.g. 1-5,8 (1-based)") from None
        if lo < 1 or hi < lo:
            raise ValueError(f"bad page range {spec!r}: pages count from 1, low-high")
        spans.append((lo, hi))
    if not spans:
        raise ValueError(f"bad page range {spec!r}: use e.g. 1-5,8 (1-based)")
    return lambda i: any(lo <= i + 1 <= hi for lo, hi in spans)


def decode_pages(item: Any, *, max_pixels: int, pdf_dpi: int, max_pdf_pages: int,
                 pages: str | None = None, rgb: bool = False,
                 max_pages: int | None = None) -> Iterator[PageImage]:
    """The one decode step: pages of one input, lazily, limits applied (stops after max_pages)."""
    for n, p in enumerate(iter_pages(item, max_pixels=max_pixels, pdf_dpi=pdf_dpi,
                                     max_pdf_pages=max_pdf_pages, rgb=rgb, pages=pages)):
        if max_pages is not None and n >= max_pages:
            return
        yield p


def load_image(item: Any, *, max_pixels: int = 80_000_000, rgb: bool = False) -> np.ndarray:
    """The single page of an image input as BGR uint8; multi-page inputs are an error."""
    pages = iter_pages(item, max_pixels=max_pixels, rgb=rgb)
    first = next(pages)
    if next(pages, None) is not None:
        raise InputError(first.source, "has several pages; use read_pages()/read_many()")
    return first.image


def _check_size(size: tuple[int, int], name: str, max_pixels: int) -> None:
    w, h = size
    if w * h > max_pixels:
        raise InputError(
            name, f"image is {w}x{h} = {w * h:,} pixels, over the limit of {max_pixels:,} "
            "(possible decompression bomb; raise max_pixels if it is genuine)", "too_many_pixels"
        )
    if w < MIN_SIDE or h < MIN_SIDE:
        raise InputError(name, f"image is {w}x{h} pixels, too small to hold text", "too_small")


def _image_pages(data: bytes, name: str, kind: str, max_pixels: int) -> Iterator[PageImage]:
    try:
        img = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise InputError(name, f"corrupt or unsupported {kind} image") from None
    except Exception as e:  # PIL raises a zoo of exceptions on hostile headers
        raise InputError(name, f"corrupt {kind} image ({e})") from None
    _check_size(img.size, name, max_pixels)
    n_frames = getattr(img, "n_frames", 1) if kind in ("tiff", "gif", "webp") else 1
    if kind == "jpeg":
        # fast path: OpenCV decodes JPEG faster than PIL and applies EXIF orientation itself
        arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if arr is None:
            raise InputError(name, "corrupt jpeg image (decoder failed)")
        yield PageImage(name, 0, arr)
        return
    if n_frames == 1:
        yield PageImage(name, 0, _pil_to_bgr(img, name))
        return
    for i, frame in enumerate(ImageSequence.Iterator(img)):
        _check_size(frame.size, f"{name} [page {i + 1}]", max_pixels)
        yield PageImage(name, i, _pil_to_bgr(frame.copy(), f"{name} [page {i + 1}]"))


def _pil_to_bgr(img: Image.Image, name: str) -> np.ndarray:
    try:
        img = ImageOps.exif_transpose(img) or img
        mode = img.mode
        if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
            arr = np.asarray(img)
            if arr.dtype != np.uint8:
                top = max(int(arr.max()), 1)
                scale = 255.0 / (65535.0 if top > 255 else 255.0)
                arr = np.clip(arr.astype(np.float32) * scale, 0, 255).astype(np.uint8)
            return cv2.cvtColor(arr, cv2.COLOR_GRAY2BGR)
        if mode == "F":
            arr = np.clip(np.asarray(img), 0, 255).astype(np.uint8)
            return cv2.cvtColor(arr, cv2.COLOR_GRAY2BGR)
        if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in img.info):
            # transparent pixels become white, the usual paper colour
            rgba = img.convert("RGBA")
            bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            img = Image.alpha_composite(bg, rgba)
        rgb = np.asarray(img.convert("RGB"))
    except InputError:
        raise
    except Exception as e:
        raise InputError(name, f"corrupt image data ({e})") from None
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)


def _array_to_bgr(arr: np.ndarray, name: str, max_pixels: int, rgb: bool) -> np.ndarray:
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (1, 3, 4)):
        raise InputError(name, "array must be HxW, HxWx1, HxWx3 or HxWx4")
    _check_size((arr.shape[1], arr.shape[0]), name, max_pixels)
    if arr.dtype == np.uint16:
        arr = (arr >> 8).astype(np.uint8)
    elif arr.dtype in (np.float32, np.float64):
        arr = np.clip(arr * (255.0 if arr.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
    elif arr.dtype != np.uint8:
        raise InputError(name, f"unsupported array dtype {arr.dtype}")
    if arr.ndim == 2 or arr.shape[2] == 1:
        return cv2.cvtColor(arr.reshape(arr.shape[0], arr.shape[1]), cv2.COLOR_GRAY2BGR)
    if arr.shape[2] == 4:
        code = cv2.COLOR_RGBA2BGR if rgb else cv2.COLOR_BGRA2BGR
        return cv2.cvtColor(arr, code)
    if rgb:
        return cv2.cvtColor(arr, cv2.COLOR_RGB2BGR)
    return np.ascontiguousarray(arr)


def _pdf_pages(
    data: bytes, name: str, dpi: int, max_pixels: int, max_pages: int,
    wanted: Callable[[int], bool] | None = None, skip: Callable[[int], bool] | None = None,
) -> Iterator[PageImage]:
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(data)
    except Exception as e:
        raise InputError(name, f"corrupt or encrypted PDF ({e})") from None
    try:
        n = len(doc)
        if n == 0:
            raise InputError(name, "PDF has no pages", "empty")
        selected = [i for i in range(n) if wanted is None or wanted(i)]
        if len(selected) > max_pages:
            raise InputError(name, f"PDF has {len(selected)} pages, over the limit of {max_pages} "
                             "(raise --max-pdf-pages or choose --pages)", "too_many_pages")
        if not selected:
            raise InputError(name, f"none of the PDF's {n} pages is in the page range", "empty")
        scale = dpi / 72.0
        for i in selected:
            if skip is not None and skip(i):
                continue
            pname = f"{name} [page {i + 1}]"
            try:
                page = doc[i]
                w, h = page.get_size()
                pw, ph = int(round(w * scale)), int(round(h * scale))
                if pw * ph > max_pixels:
                    raise InputError(
                        pname, f"page renders to {pw}x{ph} pixels at {dpi} dpi, over the "
                        f"limit of {max_pixels:,}; lower --dpi", "too_many_pixels"
                    )
                bitmap = page.render(scale=scale, fill_color=(255, 255, 255, 255))
                arr = bitmap.to_numpy()
                mode = bitmap.mode
                page.close()
            except InputError:
                raise
            except Exception as e:
                raise InputError(pname, f"cannot render PDF page ({e})") from None
            if arr.ndim == 2:
                bgr = cv2.cvtColor(arr, cv2.COLOR_GRAY2BGR)
            elif mode in ("BGRA", "BGRX"):
                bgr = cv2.cvtColor(arr, cv2.COLOR_BGRA2BGR)
            elif mode in ("RGBA", "RGBX"):
                bgr = cv2.cvtColor(arr, cv2.COLOR_RGBA2BGR)
            elif mode == "RGB":
                bgr = cv2.cvtColor(arr, cv2.COLOR_RGB2BGR)
            else:  # "BGR"
                bgr = np.ascontiguousarray(arr[:, :, :3])
            yield PageImage(name, i, bgr, dpi=float(dpi))
    finally:
        doc.close()


@dataclass(frozen=True)
class PageCount:
    """Pages of one input: ``total`` in the file, ``selected`` by a page range (what is read)."""

    total: int
    selected: int


def count_pages(item: str | os.PathLike | bytes, *, pages: str | None = None) -> PageCount:
    """Pages of an input file (or its bytes) from the header, nothing rendered or decoded: the
    cheap check before any model is loaded. Raises the InputError that decoding would raise for a
    missing, empty or unrecognised file or a PDF that does not open."""
    if isinstance(item, (bytes, bytearray)):
        name, head, src = "<bytes>", bytes(item[:1024]), io.BytesIO(item)
    else:
        name = src = os.fspath(item)
        if Path(src).is_dir():
            raise InputError(name, "is a folder; pass the files in it (the CLI expands folders)")
        try:
            with open(src, "rb") as f:
                head = f.read(1024)
        except FileNotFoundError:
            raise InputError(name, "file not found", "not_found") from None
        except OSError as e:
            raise InputError(name, f"cannot read file ({e.strerror or e})") from None
    if not head:
        raise InputError(name, "empty file (0 bytes)", "empty")
    kind = sniff(head)
    if kind == "unknown":
        raise InputError(name, "not a supported image or PDF (unrecognised content)", "unsupported")
    total = _header_pages(src, kind, name)
    wanted = parse_page_range(pages) if pages else None
    return PageCount(total, sum(1 for i in range(total) if wanted is None or wanted(i)))


def _header_pages(src: Any, kind: str, name: str) -> int:
    if kind == "pdf":
        import pypdfium2 as pdfium

        try:
            doc = pdfium.PdfDocument(src.getvalue() if isinstance(src, io.BytesIO) else src)
        except Exception as e:
            raise InputError(name, f"corrupt or encrypted PDF ({e})") from None
        try:
            return len(doc)
        finally:
            doc.close()
    if kind in ("tiff", "gif", "webp"):
        try:
            with Image.open(src) as img:
                return max(1, int(getattr(img, "n_frames", 1)))
        except Exception:  # a broken header: decoding says what is wrong, page by page
            return 1
    return 1


def expand_paths(args: list[str]) -> list[str]:
    """Files as given; folders expanded (sorted, recursive) to the images and PDFs inside."""
    out: list[str] = []
    for a in args:
        p = Path(a)
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if f.is_file() and f.suffix.lower() in IMAGE_EXTS | PDF_EXTS:
                    out.append(str(f))
        else:
            out.append(a)
    return out
