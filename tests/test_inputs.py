"""Input formats and bad input: clear errors naming the input, other inputs still complete."""

from __future__ import annotations

import io

import numpy as np
import pytest
from conftest import char_accuracy, render_lines
from PIL import Image

from ocrforge import InputError

LINES = ["Hello World 2024", "你好世界"]


@pytest.fixture(scope="module")
def rendered():
    return render_lines(LINES, size=40)


def _ok(page):
    assert char_accuracy("\n".join(LINES), page.text) >= 0.95, page.text


def test_grayscale_png(engine, rendered, tmp_path):
    p = tmp_path / "gray.png"
    rendered.image.convert("L").save(p)
    _ok(engine.read(p))


def test_rgba_png_transparent_background(engine, rendered, tmp_path):
    # black text on a fully transparent background: must be read as text on white
    rgba = Image.new("RGBA", rendered.image.size, (0, 0, 0, 0))
    alpha = Image.eval(rendered.image.convert("L"), lambda v: 255 - v)
    rgba.putalpha(alpha)
    p = tmp_path / "rgba.png"
    rgba.save(p)
    _ok(engine.read(p))


def test_16bit_png(engine, rendered, tmp_path):
    arr = np.asarray(rendered.image.convert("L")).astype(np.uint16) * 257
    p = tmp_path / "16bit.png"
    Image.fromarray(arr).save(p)
    assert Image.open(p).mode.startswith("I")
    _ok(engine.read(p))


def test_exif_rotated_jpeg(engine, rendered, tmp_path):
    # pixels stored turned by 90 degrees, EXIF orientation 6 says "rotate 90 CW to display"
    stored = rendered.image.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6
    p = tmp_path / "exif.jpg"
    stored.save(p, quality=95, exif=exif)
    page = engine.read(p)
    assert (page.width, page.height) == rendered.image.size
    _ok(page)


def test_webp_and_bmp(engine, rendered, tmp_path):
    for ext in ("webp", "bmp"):
        p = tmp_path / f"x.{ext}"
        rendered.image.save(p, lossless=True) if ext == "webp" else rendered.image.save(p)
        _ok(engine.read(p))


def test_multipage_tiff(engine, rendered, tmp_path):
    other = render_lines(["Second page 第二页"], size=40).image
    p = tmp_path / "multi.tif"
    rendered.image.save(p, save_all=True, append_images=[other])
    pages = engine.read_pages(p)
    assert [pg.page_index for pg in pages] == [0, 1]
    _ok(pages[0])
    assert char_accuracy("Second page 第二页", pages[1].text) >= 0.95
    with pytest.raises(InputError, match="pages"):
        engine.read(p)


def test_two_page_pdf(engine, rendered, tmp_path):
    other = render_lines(["PDF page two 第二页"], size=40).image
    p = tmp_path / "doc.pdf"
    rendered.image.save(p, save_all=True, append_images=[other], resolution=100)
    pages = engine.read_pages(p)
    assert len(pages) == 2
    _ok(pages[0])
    assert char_accuracy("PDF page two 第二页", pages[1].text) >= 0.95


def test_bytes_and_pil_inputs(engine, rendered):
    buf = io.BytesIO()
    rendered.image.save(buf, format="PNG")
    _ok(engine.read(buf.getvalue()))
    _ok(engine.read(rendered.image))


@pytest.mark.parametrize(
    "name,data,match",
    [
        ("corrupt.png", b"\x89PNG\r\n\x1a\n" + b"garbage" * 50, "corrupt"),
        ("empty.png", b"", "empty"),
        ("text.jpg", b"just some text, not an image", "not a supported"),
    ],
)
def test_bad_bytes_raise_named_errors(engine, tmp_path, name, data, match):
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(InputError, match=match) as ei:
        engine.read(p)
    assert name in str(ei.value)


def test_tiny_image_is_rejected(engine, tmp_path):
    p = tmp_path / "one.png"
    Image.new("RGB", (1, 1), "white").save(p)
    with pytest.raises(InputError, match="too small") as ei:
        engine.read(p)
    assert "one.png" in str(ei.value)


def test_decompression_bomb_rejected_before_decoding(engine, tmp_path):
    # a 1-bit 20000x20000 PNG is tiny on disk but 400 Mpixel
    p = tmp_path / "bomb.png"
    Image.new("1", (20000, 20000), 1).save(p, optimize=True)
    assert p.stat().st_size < 200_000
    with pytest.raises(InputError, match="over the limit") as ei:
        engine.read(p)
    assert "bomb.png" in str(ei.value)


def test_read_many_continues_after_bad_inputs(engine, rendered, tmp_path):
    good1, good2 = tmp_path / "a.png", tmp_path / "c.png"
    rendered.image.save(good1)
    rendered.image.save(good2)
    bad = tmp_path / "b.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    missing = tmp_path / "missing.png"
    pages = list(engine.read_many([good1, bad, missing, good2]))
    assert [p.source for p in pages] == [str(good1), str(bad), str(missing), str(good2)]
    assert [p.ok for p in pages] == [True, False, False, True]
    assert "corrupt" in pages[1].error and "not found" in pages[2].error
    _ok(pages[0])
    _ok(pages[3])
