"""Noise and waste: Pillow warnings stay off stderr, and a resumed PDF does not render the
pages an earlier run finished."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
from pathlib import Path

from PIL import Image

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _png_with_damaged_exif() -> bytes:
    """Readable pixels; an EXIF tag whose data points past the end (Pillow: UserWarning)."""
    ifd = (struct.pack("<2sHI", b"II", 42, 8) + struct.pack("<H", 1)
           + struct.pack("<HHII", 0x010E, 2, 1000, 4000) + b"\0\0\0\0")
    buf = io.BytesIO()
    Image.new("RGB", (200, 80), "white").save(buf, "PNG", exif=b"Exif\x00\x00" + ifd)
    return buf.getvalue()


def test_pillow_warnings_do_not_reach_stderr(tmp_path):
    path = tmp_path / "exif.png"
    path.write_bytes(_png_with_damaged_exif())
    code = ("import sys; from ocrforge.io.inputs import decode_pages; "
            "print(len(list(decode_pages(sys.argv[1], max_pixels=10**8, pdf_dpi=200, "
            "max_pdf_pages=5))))")
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PYTHONWARNINGS", None)
    r = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    assert "Warning" not in r.stderr and "site-packages" not in r.stderr, r.stderr


def test_resumed_pdf_renders_only_the_pages_not_done(monkeypatch):
    import pypdfium2 as pdfium

    from ocrforge.jobs.naming import page_name
    from ocrforge.jobs.pages import InputEnd, PageSkipped, PageTask, input_events

    pages = [Image.new("RGB", (300, 200), "white") for _ in range(6)]
    buf = io.BytesIO()
    pages[0].save(buf, "PDF", save_all=True, append_images=pages[1:], resolution=72)
    rendered: list[int] = []
    real = pdfium.PdfPage.render

    def counting(self, *a, **kw):
        rendered.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(pdfium.PdfPage, "render", counting)
    done = {page_name("book.pdf", i, 6) for i in (0, 1, 2, 4)}
    events = list(input_events(buf.getvalue(), "in/book.pdf", "book.pdf",
                               page_done=lambda name, sha: name in done,
                               input_done=lambda rel, sha: None,
                               pdf_dpi=72, max_pixels=10**8, max_pdf_pages=50))
    kinds = [(type(e).__name__, getattr(e, "page", None)) for e in events]
    assert kinds == [("PageSkipped", 0), ("PageSkipped", 1), ("PageSkipped", 2),
                     ("PageTask", 3), ("PageSkipped", 4), ("PageTask", 5), ("InputEnd", None)]
    assert len(rendered) == 2  # pages 4 and 6 only
    end = events[-1]
    assert isinstance(end, InputEnd) and end.pages == 6 and end.emitted == 2
    assert all(isinstance(e, (PageSkipped, PageTask, InputEnd)) for e in events)
