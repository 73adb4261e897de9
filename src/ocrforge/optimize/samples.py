"""Calibration and check inputs: exactly what the engine feeds each network.

det: DetPreprocessor tensors of pages; rec: RecPreprocessor batches (width-bucketed as in
OCR.recognize) of crops cut where the FP32 detector found text; cls: classify.prepare of
the same crops, half of them turned by 180 degrees so both classes are seen.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np

from ocrforge.io.inputs import IMAGE_EXTS
from ocrforge.stages import classify

if TYPE_CHECKING:
    from ocrforge.engine import OCR

ROLES = ("det", "rec", "cls")


def _images_in(folder: Path) -> list[Path]:
    lab = folder / "labels.jsonl"
    if lab.is_file():
        from ocrforge.evaluation.dataset import load_dataset

        return [r.image for r in load_dataset(folder)]
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXTS)
    if not files:
        raise ValueError(f"calibration folder {folder} holds no images")
    return files


def synth_set(pages: int, seed: int, out_dir: Path | None = None) -> Path:
    """A synthetic labeled set (``ocrforge synth``) in out_dir or a fresh temp folder."""
    from ocrforge.evaluation.synth import generate

    out = out_dir or Path(tempfile.mkdtemp(prefix=f"ocrforge-synth-{seed}-"))
    if not (out / "labels.jsonl").is_file():
        generate(out, pages, seed=seed)
    return out


def load_pages(source: str | Path | None, pages: int, seed: int = 1001) -> tuple[list[np.ndarray], str]:
    """BGR pages from a folder (dataset or plain images) or, when None, fresh synth pages."""
    if source is None:
        folder = synth_set(pages, seed)
        desc = f"synth seed={seed} pages={pages}"
    else:
        folder = Path(source)
        if not folder.is_dir():
            raise FileNotFoundError(f"calibration folder {folder} not found")
        desc = f"{folder} (first {pages} images)"
    imgs = []
    for p in _images_in(folder)[:pages]:
        im = cv2.imread(str(p), cv2.IMREAD_COLOR)
        if im is None:
            raise ValueError(f"{p}: cannot decode image for calibration")
        imgs.append(im)
    return imgs, desc


def detected_crops(engine: OCR, images: list[np.ndarray], max_crops: int = 240) -> list[np.ndarray]:
    """Crops where the (FP32) detector finds text, evenly thinned to at most max_crops."""
    crops: list[np.ndarray] = []
    from ocrforge.io.inputs import PageImage

    s = engine.runner.settings(None)
    for i, img in enumerate(images):
        d = engine.runner.detect([PageImage("calibration", i, img)], s)[0]
        crops.extend(c for c, q in zip(d.crops, d.quads, strict=True) if not d.whole_image or q is not d.quads[-1])
    if len(crops) > max_crops:
        idx = np.linspace(0, len(crops) - 1, max_crops).round().astype(int)
        crops = [crops[i] for i in idx]
    return crops


def det_inputs(engine: OCR, images: list[np.ndarray]) -> list[np.ndarray]:
    return [engine.det_prep(img).tensor for img in images]


def rec_inputs(engine: OCR, crops: list[np.ndarray], batch: int | None = None) -> list[np.ndarray]:
    bs = batch or engine.config.rec_batch()
    return [engine.rec_prep([crops[i] for i in g], w) for w, g in engine.rec_prep.groups(crops, bs)]


def cls_inputs(crops: list[np.ndarray], batch: int = 32) -> list[np.ndarray]:
    turned = [np.ascontiguousarray(c[::-1, ::-1]) if i % 2 else c for i, c in enumerate(crops)]
    return [classify.prepare(turned[i : i + batch]) for i in range(0, len(turned), batch)]


@dataclass
class CalibrationSet:
    role: str
    inputs: list[np.ndarray]
    description: str


def calibration_inputs(role: str, engine: OCR, images: list[np.ndarray], desc: str) -> CalibrationSet:
    if role == "det":
        return CalibrationSet(role, det_inputs(engine, images), f"{desc}: {len(images)} det tensors")
    crops = detected_crops(engine, images)
    if not crops:
        raise ValueError(f"calibration pages ({desc}) gave no text crops for {role}")
    if role == "rec":
        # batches of 8 keep the calibration session's memory low (ORT's calibrator runs an
        # augmented graph that holds every activation); ranges do not depend on batch size
        x = rec_inputs(engine, crops[:240], batch=8)
        return CalibrationSet(role, x, f"{desc}: {len(crops)} crops in {len(x)} rec batches")
    if role == "cls":
        x = cls_inputs(crops)
        return CalibrationSet(role, x, f"{desc}: {len(crops)} crops (half turned 180) in {len(x)} batches")
    raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
