"""Per-network accuracy on labeled data, and the sweep that finds which nodes must stay float.

Scores (lower is better, so every role is "error"):
  rec: character error rate on crops cut at the reference polygons, against their text;
  det: 1 - F1 of detected lines against the reference lines (IoU 0.5);
  cls: error rate of the 0/180 decision on reference crops, half of them turned by 180.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from ocrforge.stages import classify
from ocrforge.stages.crop import crop_quad

if TYPE_CHECKING:
    from ocrforge.engine import OCR


@dataclass
class LabeledSet:
    images: list[np.ndarray]
    polys: list[list[np.ndarray]]  # care lines per page
    ignore: list[list[np.ndarray]]
    crops: list[np.ndarray]
    texts: list[str]
    description: str


def labeled_set(dataset: str | Path, pages: int | None = None, max_crops: int = 300) -> LabeledSet:
    from ocrforge.evaluation.dataset import load_dataset

    recs = [r for r in load_dataset(dataset) if r.lines is not None][: pages or None]
    images, polys, ignore, crops, texts = [], [], [], [], []
    for r in recs:
        img = cv2.imread(str(r.image), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError(f"{r.image}: cannot decode image")
        images.append(img)
        care = [np.asarray(ln.poly, np.float32).reshape(-1, 2)[:4] for ln in r.lines if not ln.ignore]
        polys.append(care)
        ignore.append([np.asarray(ln.poly, np.float32).reshape(-1, 2)[:4] for ln in r.lines if ln.ignore])
        for ln, q in zip(r.care_lines, care, strict=True):
            if ln.text.strip():
                crops.append(crop_quad(img, q))
                texts.append(ln.text)
    if len(crops) > max_crops:
        idx = np.linspace(0, len(crops) - 1, max_crops).round().astype(int)
        crops = [crops[i] for i in idx]
        texts = [texts[i] for i in idx]
    return LabeledSet(images, polys, ignore, crops, texts, f"{dataset}: {len(recs)} pages, {len(crops)} line crops")


def rec_error(engine: OCR, rt: Any, ls: LabeledSet) -> float:
    from ocrforge.evaluation.metrics import char_errors

    edits = total = 0
    for w, g in engine.rec_prep.groups(ls.crops, engine.config.rec_batch(),
                                          engine.config.rec_batch_pixels()):
        out = engine.ctc(rt.run(engine.rec_prep([ls.crops[i] for i in g], w)))
        for i, (text, _) in zip(g, out, strict=True):
            e, n = char_errors(ls.texts[i], text, True)
            edits += e
            total += n
    return edits / max(total, 1)


def det_error(engine: OCR, rt: Any, ls: LabeledSet) -> float:
    from ocrforge.evaluation.metrics import match_lines, prf

    tp = n_hyp = n_ref = 0
    for img, care, ign in zip(ls.images, ls.polys, ls.ignore, strict=True):
        d = engine.det_prep(img)
        prob = rt.run(d.tensor)
        h, w = d.tensor.shape[2:]
        quads = engine.det_decode(prob[0, 0, :h, :w], d)
        refs = [*care, *ign]
        m = match_lines([q.tolist() for q in refs], [q.tolist() for q in quads],
                        [False] * len(care) + [True] * len(ign))
        tp += len(m.pairs)
        n_hyp += m.n_hyp
        n_ref += m.n_ref
    return 1.0 - prf(tp, n_hyp, n_ref)[2]


def cls_error(engine: OCR, rt: Any, ls: LabeledSet, batch: int = 32) -> float:
    crops = [np.ascontiguousarray(c[::-1, ::-1]) if i % 2 else c for i, c in enumerate(ls.crops)]
    wrong = 0
    for s in range(0, len(crops), batch):
        flips = classify.decide(rt.run(classify.prepare(crops[s : s + batch])), 0.5)
        wrong += sum(f != bool((s + k) % 2) for k, f in enumerate(flips))
    return wrong / max(len(crops), 1)


ROLE_ERROR: dict[str, Callable[..., float]] = {"rec": rec_error, "det": det_error, "cls": cls_error}


def role_error(role: str, engine: OCR, rt: Any, ls: LabeledSet) -> float:
    return ROLE_ERROR[role](engine, rt, ls)


@dataclass
class SweepResult:
    exclude: list[str]
    excluded_groups: list[str]
    fp32_error: float
    full_int8_error: float
    final_error: float
    rows: list[dict[str, Any]] = field(default_factory=list)


def sweep(role: str, engine: OCR, pre_path: Path, samples: list[np.ndarray], ls: LabeledSet, *,
          method: str = "minmax", tolerance: float = 0.002, max_groups: int = 3,
          log: Callable[[str], None] = print) -> SweepResult:
    """Greedy per-group sensitivity sweep.

    Quantize everything, then for each candidate group (int8.node_groups) quantize with that
    group kept float and measure the role's labeled error. Groups are then kept float in
    order of the error they remove, until the INT8 error is within ``tolerance`` of FP32 or
    ``max_groups`` groups are float. Calibration runs once (ranges are cached)."""
    from ocrforge.optimize.int8 import node_groups, quantize_static
    from ocrforge.runtimes.onnxruntime import OrtRuntime

    cfg = engine.config
    fp32_rt = getattr(engine, f"{role}_rt") or OrtRuntime(getattr(engine.models, role), cfg)
    fp32_err = role_error(role, engine, fp32_rt, ls)
    rows: list[dict[str, Any]] = [{"group": "fp32 reference", "nodes": 0, "error": fp32_err}]
    with tempfile.TemporaryDirectory(prefix="ocrforge-sweep-") as tmp:
        cache = Path(tmp) / "ranges.json"

        def measure(exclude: list[str]) -> float:
            out = Path(tmp) / "cand.onnx"
            quantize_static(pre_path, out, samples, method=method, exclude=exclude, cache_path=cache)
            return role_error(role, engine, OrtRuntime(out, cfg, "int8"), ls)

        t0 = time.perf_counter()
        full = measure([])
        rows.append({"group": "all quantized", "nodes": 0, "error": full})
        log(f"  {role}: fp32 error {fp32_err:.4f}, full int8 {full:.4f}")
        gains = []
        for name, nodes in node_groups(pre_path):
            e = measure(nodes)
            rows.append({"group": f"keep float: {name}", "nodes": len(nodes), "error": e})
            log(f"  {role}: keep float {name:<34} ({len(nodes):3d} nodes) -> error {e:.4f}")
            gains.append((full - e, name, nodes))
        gains.sort(key=lambda t: -t[0])
        exclude: list[str] = []
        chosen: list[str] = []
        err = full
        for gain, name, nodes in gains:
            if err - fp32_err <= tolerance or len(chosen) >= max_groups or gain <= 0:
                break
            cand = exclude + nodes
            e = measure(cand)
            if e < err:
                exclude, err = cand, e
                chosen.append(name)
                rows.append({"group": f"chosen: {' + '.join(chosen)}", "nodes": len(exclude), "error": e})
        # refinement: one node of a chosen group may hold all of its effect (an outlier-heavy
        # activation); keeping only that node float keeps the rest of the group fast
        if len(chosen) == 1 and len(exclude) > 1:
            singles = []
            for n in exclude:
                e = measure([n])
                rows.append({"group": f"keep float: node {n}", "nodes": 1, "error": e})
                log(f"  {role}: keep float node {n:<29} -> error {e:.4f}")
                singles.append((e, n))
            e, n = min(singles)
            if e <= err or e - fp32_err <= tolerance:
                exclude, err, chosen = [n], e, [n]
                rows.append({"group": f"chosen: {n}", "nodes": 1, "error": e})
        log(f"  {role}: sweep took {time.perf_counter() - t0:.0f}s; keep float: {chosen or 'nothing'}")
    return SweepResult(exclude, chosen, fp32_err, full, err, rows)
