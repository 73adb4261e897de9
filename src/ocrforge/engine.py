"""OCR: wires the stages, runtimes and scheduling together."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ocrforge.config import EngineConfig, load_profile
from ocrforge.io.inputs import InputError, PageImage, describe, iter_pages
from ocrforge.models.registry import resolve_models
from ocrforge.result import Line, Page
from ocrforge.runtimes.factory import build_runtime
from ocrforge.stages import classify
from ocrforge.stages.crop import crop_quad
from ocrforge.stages.detect import DBDecoder, DetPreprocessor, stack_padded
from ocrforge.stages.recognize import CTCDecoder, RecPreprocessor, width_buckets

STAGES = ("decode", "det_prep", "det_infer", "det_post", "crop", "cls", "rec_prep", "rec_infer", "rec_post")


class OCR:
    """A ready-to-use OCR engine.

    >>> ocr = OCR()                      # default model set, ONNX Runtime on the CPU
    >>> page = ocr.read("receipt.jpg")   # path, bytes, numpy array (BGR) or PIL image
    >>> print(page.text)
    """

    def __init__(self, config: EngineConfig | None = None, *, profile: str | None = None,
                 **overrides: Any):
        cfg = load_profile(profile) if profile else (config or EngineConfig())
        if overrides:
            cfg = cfg.with_(**overrides)
        cfg.validate()
        self.config = cfg
        self.models = resolve_models(cfg.model_set, cfg.model_dir)
        ms = self.models.model_set
        det = cfg.resolved_det()
        self.det_prep = DetPreprocessor(ms.det_constants, cfg.det_limit_side, cfg.det_limit_type,
                                        cfg.det_min_side, cfg.det_max_upscale)
        self.det_decode = DBDecoder(det["thresh"], det["box_thresh"], det["unclip_ratio"],
                                    int(det["max_candidates"]), cfg.det_min_size)
        self.rec_prep = RecPreprocessor(ms.rec_constants, cfg.rec_max_width, cfg.rec_width_step,
                                        cfg.rec_min_width)
        self.ctc = CTCDecoder(self.models.characters())
        self.det_rt = build_runtime("det", self.models.det, cfg)
        self.rec_rt = build_runtime("rec", self.models.rec, cfg)
        self.cls_rt = build_runtime("cls", self.models.cls, cfg) if cfg.use_cls else None
        # keyword options of ocrforge.layout.analyze, or None: no layout stage (ocr_images only;
        # a stop-gap until the core runner calls the layout stage from the config)
        self.layout: dict[str, Any] | None = None

    # ---------------------------------------------------------------- public API
    def read(self, item: Any, *, rgb: bool = False) -> Page:
        """OCR a single image (path, bytes, BGR numpy array, or PIL image).

        Raises InputError for unreadable input and for multi-page inputs (use read_pages).
        Set ``rgb=True`` when a numpy array is in RGB order.
        """
        t0 = time.perf_counter()
        pages = list(iter_pages(item, max_pixels=self.config.max_pixels,
                                pdf_dpi=self.config.pdf_dpi,
                                max_pdf_pages=self.config.max_pdf_pages, rgb=rgb))
        if len(pages) != 1:
            raise InputError(describe(item), f"has {len(pages)} pages; use read_pages()")
        decode_s = time.perf_counter() - t0
        page = self.ocr_images([pages[0]])[0]
        page.timings["decode"] = decode_s
        return page

    def read_pages(self, item: Any, *, rgb: bool = False) -> list[Page]:
        """OCR every page of one input (a PDF, a multi-page TIFF, or a single image)."""
        pages = list(iter_pages(item, max_pixels=self.config.max_pixels,
                                pdf_dpi=self.config.pdf_dpi,
                                max_pdf_pages=self.config.max_pdf_pages, rgb=rgb))
        return self.ocr_images(pages)

    def read_many(self, items: Iterable[Any], *, batch_pages: int = 4) -> Iterator[Page]:
        """OCR many inputs, yielding one Page per page in input order.

        A bad input does not stop the job: it yields a Page whose ``error`` names the input
        and the reason (``page.ok`` is False).
        """
        cfg = self.config
        if cfg.runtime == "torch" and cfg.device.startswith("cuda") and not cfg.use_cls:
            # GPU throughput path: batches across pages, crops and CTC argmax on the device
            from ocrforge.scheduling.gpu_pipeline import pipeline_for

            yield from pipeline_for(self).run(items)
            return
        from ocrforge.scheduling.pipeline import run_pipeline

        yield from run_pipeline(self, items, batch_pages=batch_pages)

    # ---------------------------------------------------------------- core
    def detect(self, images: list[np.ndarray], timings: list[dict[str, float]]) -> list[list[np.ndarray]]:
        """Quadrilaterals per image; batches pages when det_batch_size > 1."""
        out: list[list[np.ndarray]] = []
        bs = self.config.det_batch_size
        for start in range(0, len(images), bs):
            chunk = images[start : start + bs]
            t0 = time.perf_counter()
            dins = [self.det_prep(img) for img in chunk]
            batch = stack_padded(dins)
            t1 = time.perf_counter()
            probs = self.det_rt.run(batch)
            t2 = time.perf_counter()
            for k, d in enumerate(dins):
                h, w = d.tensor.shape[2:]
                out.append(self.det_decode(probs[k, 0, :h, :w], d))
            t3 = time.perf_counter()
            n = len(chunk)
            for k in range(n):
                tm = timings[start + k]
                tm["det_prep"] = (t1 - t0) / n
                tm["det_infer"] = (t2 - t1) / n
                tm["det_post"] = (t3 - t2) / n
        return out

    def recognize(self, crops: list[np.ndarray], steps: bool = False) -> tuple[list[Any], dict[str, float]]:
        """Text and score per crop (CharSteps with ``steps``); crops are batched by similar width."""
        results: list[Any] = [("", 0.0)] * len(crops)
        tm = {"rec_prep": 0.0, "rec_infer": 0.0, "rec_post": 0.0}
        for group in width_buckets(crops, self.config.rec_batch_size):
            t0 = time.perf_counter()
            batch = self.rec_prep([crops[i] for i in group])
            t1 = time.perf_counter()
            probs = self.rec_rt.run(batch)
            t2 = time.perf_counter()
            decoded = (self.ctc.decode_steps(probs, [self.rec_prep.target_width(crops[i]) for i in group],
                                             batch.shape[3]) if steps else self.ctc(probs))
            for i, r in zip(group, decoded, strict=True):
                results[i] = r
            t3 = time.perf_counter()
            tm["rec_prep"] += t1 - t0
            tm["rec_infer"] += t2 - t1
            tm["rec_post"] += t3 - t2
        return results, tm

    def orient(self, crops: list[np.ndarray]) -> list[int]:
        """Turn upside-down crops (in place in the list); returns 0/180 per crop."""
        angles = [0] * len(crops)
        if self.cls_rt is None or not crops:
            return angles
        bs = self.config.cls_batch_size
        for start in range(0, len(crops), bs):
            probs = self.cls_rt.run(classify.prepare(crops[start : start + bs]))
            for k, flip in enumerate(classify.decide(probs, self.config.cls_thresh)):
                if flip:
                    crops[start + k] = np.ascontiguousarray(crops[start + k][::-1, ::-1])
                    angles[start + k] = 180
        return angles

    def ocr_images(self, pages: list[PageImage]) -> list[Page]:
        """Run detection per page and recognition batched across all pages given."""
        if not pages:
            return []
        timings: list[dict[str, float]] = [dict.fromkeys(STAGES, 0.0) for _ in pages]
        quads = self.detect([p.image for p in pages], timings)
        crops: list[np.ndarray] = []
        owner: list[tuple[int, np.ndarray]] = []
        for pi, (p, qs) in enumerate(zip(pages, quads, strict=True)):
            t0 = time.perf_counter()
            for q in qs:
                crops.append(crop_quad(p.image, q))
                owner.append((pi, q))
            timings[pi]["crop"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        angles = self.orient(crops)
        cls_s = time.perf_counter() - t0
        texts, rec_tm = self.recognize(crops, steps=self.layout is not None)
        steps: list[list[Any]] = [[] for _ in pages]
        # shared batch costs are split over pages by their share of crops
        counts = [len(q) for q in quads]
        total = max(sum(counts), 1)
        lines: list[list[Line]] = [[] for _ in pages]
        drop = self.config.drop_score
        for (pi, q), r, angle in zip(owner, texts, angles, strict=True):
            text, score = (r.text, r.score) if self.layout is not None else r
            if score < drop or not text.strip():
                continue
            lines[pi].append(Line(text, q.tolist(), score, angle))
            steps[pi].append(r)
        result = []
        for pi, p in enumerate(pages):
            share = counts[pi] / total
            tm = timings[pi]
            tm["cls"] = cls_s * share
            for k, v in rec_tm.items():
                tm[k] = v * share
            h, w = p.image.shape[:2]
            page = Page(lines[pi], w, h, p.source, p.index, tm)
            if self.layout is not None:
                from ocrforge.layout import analyze

                t0 = time.perf_counter()
                page = analyze(page, image=p.image, steps=steps[pi], **self.layout)
                tm["layout"] = time.perf_counter() - t0
            result.append(page)
        return result


def read(item: Any, **overrides: Any) -> Page:
    """One-liner: OCR a single image with the default engine (cached per options)."""
    key = tuple(sorted(overrides.items()))
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = OCR(**overrides)
    return eng.read(item)


_ENGINES: dict[tuple, OCR] = {}
