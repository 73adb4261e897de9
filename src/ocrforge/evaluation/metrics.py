"""Accuracy metrics shared by `ocrforge eval`, `ocrforge bench` and the benchmarks.

Definitions (docs/ACCURACY.md repeats them):

* **Normalisation** (``normalize_text``): Unicode NFKC (full-width ASCII -> ASCII, compatibility
  forms folded), then every run of whitespace becomes one space and the ends are stripped.
  Nothing else is changed: punctuation and case count. ``casefold=True`` additionally
  compares case-insensitively (``str.casefold``); ``eval`` turns it on for ``kind == "receipt"``
  by default because the SROIE labels are upper-case (see ``CASEFOLD_KINDS``).
* **CER** of a page = Levenshtein distance (insert, delete, substitute: cost 1 each) between
  the normalised reference and hypothesis texts / length of the normalised reference.
  The corpus CER is ``sum(edits) / sum(ref_len)`` (long pages weigh more); the mean of the
  per-page CERs is reported next to it.
* **Detection**: a hypothesis line matches a reference line when their polygons have
  IoU >= 0.5; matching is one-to-one, greedy by descending IoU. Reference lines marked
  ``ignore`` are don't-care: they are never counted as misses, and a hypothesis that is not
  matched to a cared-for line and lies mostly (> 50 % of its area) inside ignore regions is not
  counted as a false positive.
* **Line accuracy** (end to end) = matched lines whose normalised texts are equal / cared-for
  reference lines.
* **Aligned CER** (``align_order``): the same edit distance, but the hypothesis lines are put in
  the order of the reference lines they overlap most (lines overlapping none go next to the
  nearest reference line), so it does not count differences of reading order or of how
  multi-column text was split into lines; page CER minus aligned CER is that effect.
* **Word accuracy** (``word_errors``): 1 - word-level edit distance / reference words, words being
  the whitespace-separated tokens of the normalised texts. It counts spaces: two words glued
  together are one substitution and one deletion. (Chinese text without spaces is one token per
  run of characters, so this is a measure for space-delimited text.)
* **Reading order** (``order_tau``): Kendall's tau between the hypothesis lines' order and the
  reading-order ranks of the reference lines they overlap most (lines overlapping none left out):
  1 = same order, -1 = reversed.
* **Table cells** (``cell_f1``): a predicted cell counts when a reference cell at the same (row,
  column) has the same normalised text, ignoring spaces; F1 over the cells of matched tables.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from rapidfuzz.distance import Levenshtein
from shapely.geometry import Polygon
from shapely.ops import unary_union

_WS = re.compile(r"\s+")

Poly = Sequence[Sequence[float]]


def normalize_text(s: str, casefold: bool = False) -> str:
    """NFKC, collapse whitespace runs to one space, strip; optionally case-fold."""
    s = _WS.sub(" ", unicodedata.normalize("NFKC", s)).strip()
    return s.casefold() if casefold else s


def char_errors(ref: str, hyp: str, casefold: bool = False) -> tuple[int, int]:
    """(edit distance, reference length) after ``normalize_text`` of both strings."""
    r = normalize_text(ref, casefold)
    h = normalize_text(hyp, casefold)
    return Levenshtein.distance(r, h), len(r)


def cer(ref: str, hyp: str, casefold: bool = False) -> float:
    """Character error rate of one pair; an empty reference gives 0.0 (or 1.0 if hyp is not empty)."""
    e, n = char_errors(ref, hyp, casefold)
    if n == 0:
        return 0.0 if e == 0 else 1.0
    return e / n


def word_errors(ref: str, hyp: str, casefold: bool = False) -> tuple[int, int]:
    """(word-level edit distance, reference words) after ``normalize_text`` of both strings."""
    r = normalize_text(ref, casefold).split()
    h = normalize_text(hyp, casefold).split()
    return Levenshtein.distance(r, h), len(r)


def kendall_tau(ranks: Sequence[float]) -> float | None:
    """Kendall's tau-a over the pairs of distinct ranks between ``ranks`` (in hypothesis order) and
    their sorted order; None with fewer than two distinct ranks."""
    r = np.asarray(ranks, np.float64)
    if len(r) < 2:
        return None
    d = np.sign(r[None, :] - r[:, None])[np.triu_indices(len(r), 1)]
    n = int(np.count_nonzero(d))
    return float(d.sum() / n) if n else None


def to_polygon(poly: Poly) -> Polygon:
    """A valid shapely polygon for a list of [x, y] corners (self-intersections repaired)."""
    p = Polygon([(float(x), float(y)) for x, y in poly])
    if not p.is_valid:
        p = p.buffer(0)
        if p.is_empty or p.area <= 0:
            p = Polygon([(float(x), float(y)) for x, y in poly]).convex_hull
    return p


def poly_iou(a: Poly | Polygon, b: Poly | Polygon) -> float:
    """Intersection over union of two polygons (0.0 when either has no area)."""
    pa = a if isinstance(a, Polygon) else to_polygon(a)
    pb = b if isinstance(b, Polygon) else to_polygon(b)
    inter = pa.intersection(pb).area
    union = pa.area + pb.area - inter
    return float(inter / union) if union > 0 else 0.0


@dataclass
class Match:
    """Result of ``match_lines``: index pairs (ref, hyp, iou) and the counts that follow."""

    pairs: list[tuple[int, int, float]] = field(default_factory=list)
    n_ref: int = 0  # cared-for reference lines
    n_hyp: int = 0  # hypothesis lines that count (ignored ones excluded)
    ignored_hyp: list[int] = field(default_factory=list)

    @property
    def tp(self) -> int:
        return len(self.pairs)

    @property
    def fp(self) -> int:
        return self.n_hyp - self.tp

    @property
    def fn(self) -> int:
        return self.n_ref - self.tp


def _bboxes(polys: Sequence[Poly]) -> np.ndarray:
    if not polys:
        return np.zeros((0, 4))
    out = np.empty((len(polys), 4))
    for i, p in enumerate(polys):
        a = np.asarray(p, dtype=np.float64).reshape(-1, 2)
        out[i] = a[:, 0].min(), a[:, 1].min(), a[:, 0].max(), a[:, 1].max()
    return out


def match_lines(ref_polys: Sequence[Poly], hyp_polys: Sequence[Poly],
                ignore_mask: Sequence[bool] | None = None, iou: float = 0.5,
                ignore_cover: float = 0.5) -> Match:
    """One-to-one matching of hypothesis to reference lines at IoU >= ``iou``.

    ``ignore_mask[i]`` marks reference line i as a don't-care region. Unmatched hypotheses
    with more than ``ignore_cover`` of their area inside the union of ignore regions are
    listed in ``ignored_hyp`` and not counted in ``n_hyp``.
    """
    ignore = list(ignore_mask) if ignore_mask is not None else [False] * len(ref_polys)
    if len(ignore) != len(ref_polys):
        raise ValueError("ignore_mask must have one entry per reference polygon")
    care = [i for i, ig in enumerate(ignore) if not ig]
    ign = [i for i, ig in enumerate(ignore) if ig]
    rp = [to_polygon(ref_polys[i]) for i in care]
    hp = [to_polygon(p) for p in hyp_polys]
    rb, hb = _bboxes([ref_polys[i] for i in care]), _bboxes(hyp_polys)
    cands: list[tuple[float, int, int]] = []
    if len(rb) and len(hb):
        # only polygons whose bounding boxes overlap can have IoU > 0
        ov = ((rb[:, None, 0] < hb[None, :, 2]) & (hb[None, :, 0] < rb[:, None, 2])
              & (rb[:, None, 1] < hb[None, :, 3]) & (hb[None, :, 1] < rb[:, None, 3]))
        for a, b in zip(*np.nonzero(ov), strict=True):
            v = poly_iou(rp[a], hp[b])
            if v >= iou:
                cands.append((v, int(a), int(b)))
    cands.sort(key=lambda t: (-t[0], t[1], t[2]))
    used_r: set[int] = set()
    used_h: set[int] = set()
    pairs = []
    for v, a, b in cands:
        if a in used_r or b in used_h:
            continue
        used_r.add(a)
        used_h.add(b)
        pairs.append((care[a], b, v))
    ignored: list[int] = []
    if ign:
        region = unary_union([to_polygon(ref_polys[i]) for i in ign])
        for j, p in enumerate(hp):
            if j in used_h or p.area <= 0:
                continue
            if p.intersection(region).area / p.area > ignore_cover:
                ignored.append(j)
    pairs.sort()
    return Match(pairs, len(care), len(hyp_polys) - len(ignored), ignored)


def prf(tp: int, n_hyp: int, n_ref: int) -> tuple[float, float, float]:
    """Precision, recall, F1 (an empty side counts as perfect: 1.0)."""
    p = tp / n_hyp if n_hyp else 1.0
    r = tp / n_ref if n_ref else 1.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f


def hyp_ranks(ref_polys: Sequence[Poly], ref_rank: Sequence[int], hyp_polys: Sequence[Poly]) -> list[float | None]:
    """For every hypothesis line, the rank of the reference line it overlaps most (largest
    intersection); None where it overlaps none."""
    if not hyp_polys or not ref_polys:
        return [None] * len(hyp_polys)
    hb, rb = _bboxes(hyp_polys), _bboxes(ref_polys)
    rp = [to_polygon(p) for p in ref_polys]
    out: list[float | None] = []
    for j, hpoly in enumerate(hyp_polys):
        ov = np.nonzero((rb[:, 0] < hb[j, 2]) & (hb[j, 0] < rb[:, 2]) & (rb[:, 1] < hb[j, 3]) & (hb[j, 1] < rb[:, 3]))[0]
        best, best_a = -1, 0.0
        if len(ov):
            hp = to_polygon(hpoly)
            for i in ov:
                a = hp.intersection(rp[i]).area
                if a > best_a:
                    best, best_a = int(i), a
        out.append(float(ref_rank[best]) if best >= 0 else None)
    return out


def order_tau(ref_polys: Sequence[Poly], ref_rank: Sequence[int], hyp_polys: Sequence[Poly]) -> float | None:
    """Kendall's tau of the hypothesis lines' order against the reference reading order."""
    return kendall_tau([r for r in hyp_ranks(ref_polys, ref_rank, hyp_polys) if r is not None])


def align_order(ref_polys: Sequence[Poly], ref_rank: Sequence[int], hyp_polys: Sequence[Poly]) -> list[int]:
    """Hypothesis indices ordered like the reference lines they overlap most.

    ``ref_rank[i]`` is reference line i's position in reading order. A hypothesis line takes the
    rank of the reference line with the largest intersection (as a share of the hypothesis
    area); one that overlaps none takes the nearest reference line's rank + 0.5. Ties keep
    left-to-right, then top-to-bottom order.
    """
    if not hyp_polys:
        return []
    hb = _bboxes(hyp_polys)
    hc = np.stack([(hb[:, 0] + hb[:, 2]) / 2, (hb[:, 1] + hb[:, 3]) / 2], 1)
    if not ref_polys:
        return sorted(range(len(hyp_polys)), key=lambda j: (hc[j, 1], hc[j, 0]))
    rb = _bboxes(ref_polys)
    rc = np.stack([(rb[:, 0] + rb[:, 2]) / 2, (rb[:, 1] + rb[:, 3]) / 2], 1)
    keys = []
    for j, rank in enumerate(hyp_ranks(ref_polys, ref_rank, hyp_polys)):
        if rank is None:
            near = int(np.argmin(((rc - hc[j]) ** 2).sum(1)))
            rank = ref_rank[near] + 0.5
        keys.append((rank, hc[j, 0], hc[j, 1], j))
    return [k[3] for k in sorted(keys)]


def cell_f1(ref_cells: Sequence[tuple[int, int, str]], hyp_cells: Sequence[tuple[int, int, str]]) -> tuple[int, int, int]:
    """(matching cells, reference cells, hypothesis cells) of two tables given as (row, col, text);
    empty cells are left out on both sides."""
    def key(cells: Sequence[tuple[int, int, str]]) -> set[tuple[int, int, str]]:
        return {(r, c, "".join(normalize_text(t).split())) for r, c, t in cells if t.strip()}

    ref, hyp = key(ref_cells), key(hyp_cells)
    return len(ref & hyp), len(ref), len(hyp)
