"""Words of a recognised line from its CTC time steps: spaces the model left out, word boxes.

Where a character sits: the argmax run of character k covers steps ``start[k]..end[k]``, and step t
lies at u = (t + 0.5) / content_steps of the crop's width (the network sees the crop resized to
height 48 and right-padded to the batch width; ``content_steps`` counts the steps over the crop
itself). u is mapped to the page through the line's quad (tl, tr, br, bl): along the top and bottom
edges, or along the left and right edges for tall lines that were turned 90 degrees before
recognition; a line the orientation classifier flipped (angle 180) reads u backwards.

Spaces: the model emits most spaces itself. Where it did not, a space is inserted between two
characters when (a) the space class kept some probability between them and (b) the gap between
them, in units of the line's em, is wider than the two characters' expected half-widths say. Never
between two CJK characters. Thresholds per pair of character classes, chosen on synthetic pages
(docs/ACCURACY.md, "Word spaces").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ocrforge.layout.small_stats import small_median
from ocrforge.result import Line, Word
from ocrforge.stages.crop import VERTICAL_RATIO
from ocrforge.stages.recognize import CharSteps

_CJK = re.compile(r"[\u2e80-\u2fff\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
                  r"\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f]")
_FULLWIDTH_PUNCT = re.compile(r"[\u3000-\u303f\uff00-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]")
_NARROW = frozenset("iljtfrI1.,:;'!|()[]{}`\"-/")
_WIDE = frozenset("mwMW@%")


@lru_cache(maxsize=65536)
def char_class(c: str) -> str:
    """C: CJK ideograph / kana / hangul; F: full-width punctuation; L: letter; D: digit; P: other."""
    if _CJK.match(c):
        return "C"
    if _FULLWIDTH_PUNCT.match(c):
        return "F"
    if c.isdigit():
        return "D"
    if c.isalpha():
        return "L"
    return "P"


@lru_cache(maxsize=65536)
def char_width(c: str) -> float:
    """Typical advance of a character in em (a rough table: CJK 1, Latin by letter shape)."""
    k = char_class(c)
    if k in "CF":
        return 1.0
    if c in _NARROW:
        return 0.33
    if c in _WIDE:
        return 0.85
    if c.isupper():
        return 0.68
    return 0.56


@dataclass(frozen=True)
class SpaceRule:
    """Thresholds for inserting a space between two characters the model put none between.

    A pair qualifies by the classes of its two characters; it gets a space when the space
    probability between them exceeds ``*_prob`` and the gap exceeds the expected advance by more
    than ``*_em`` (in em, the line's scale estimated from its other character pairs). A threshold
    pair of None never inserts. Thresholds chosen on 140 synthetic pages (docs/ACCURACY.md, "Word
    spaces"). Off by default: Latin punctuation next to a letter or digit (no gain on synthetic
    pages) and a CJK character next to a letter or digit: (0.01, 0.2) is best on synthetic pages,
    whose mixed text has a space at every such boundary, but real Chinese print sets a visible gap
    there without a space character, and on the dev set's Chinese documents it cost word accuracy.
    """

    latin: tuple[float, float] | None = (0.2, 0.3)  # letter/digit next to letter/digit
    cjk_latin: tuple[float, float] | None = None  # CJK character next to a letter or digit
    punct: tuple[float, float] | None = None  # Latin punctuation next to a letter or digit
    # a lower-case letter followed by a capital ("CarolWang"): a word boundary far more often
    # than not, so a lower gap is enough (chosen on English synthetic pages, issue 21)
    case_change: tuple[float, float] | None = (0.2, -0.1)
    enabled: bool = True

    def pair_thresholds(self, a: str, b: str) -> tuple[float, float] | None:
        """Thresholds for the characters ``a`` then ``b`` (``thresholds`` by class, or
        ``case_change`` for a lower-case Latin letter before a capital)."""
        if self.case_change is not None and a.islower() and b.isupper() and a.isascii() and b.isascii():
            return self.case_change
        return self.thresholds(char_class(a), char_class(b))

    def thresholds(self, a: str, b: str) -> tuple[float, float] | None:
        pair = {a, b}
        if "F" in pair or pair == {"C"} or pair == {"P"}:
            return None  # never inside CJK text, around full-width punctuation, or between symbols
        if pair <= {"L", "D"}:
            return self.latin
        if "C" in pair:
            return self.cjk_latin if pair & {"L", "D"} else None
        return self.punct


DEFAULT_SPACE_RULE = SpaceRule()


def missing_spaces(steps: CharSteps, rule: SpaceRule = DEFAULT_SPACE_RULE) -> np.ndarray:
    """Indices k of characters after which a space is inserted (text[k] and text[k+1] are both
    non-space characters the model put no space between)."""
    text = steps.text
    n = len(text)
    if not rule.enabled or n < 3 or steps.gap_space is None:
        return np.zeros(0, np.int64)
    center = (steps.start + steps.end + 1) * 0.5
    width = np.array([char_width(c) for c in text])
    nonspace = np.array([c != " " for c in text])
    adj = nonspace[:-1] & nonspace[1:]  # pairs of neighbouring non-space characters
    if adj.sum() < 2:
        return np.zeros(0, np.int64)
    expected = (width[:-1] + width[1:]) * 0.5
    actual = np.diff(center)
    ratio = actual[adj] / expected[adj]
    em = small_median(ratio)  # steps per em: most neighbouring pairs have no space between
    if em <= 0:
        return np.zeros(0, np.int64)
    excess = actual / em - expected
    out = []
    for k in np.flatnonzero(adj & (steps.gap_space > 0)):
        th = rule.pair_thresholds(text[k], text[k + 1])
        if th is not None and steps.gap_space[k] > th[0] and excess[k] > th[1]:
            out.append(k)
    return np.array(out, np.int64)


@dataclass
class WordSpan:
    """A word of a line in crop coordinates: u0..u1 are fractions of the crop's width."""

    text: str
    u0: float
    u1: float
    score: float


def split_words(steps: CharSteps, rule: SpaceRule = DEFAULT_SPACE_RULE) -> tuple[str, list[WordSpan]]:
    """The line's text with missing spaces inserted, and its words with their extents."""
    text = steps.text
    if not text:
        return "", []
    cut = np.zeros(len(text), bool)  # cut[k]: a word ends after character k
    cut[missing_spaces(steps, rule)] = True
    span = max(steps.content_steps, 1e-6)
    words: list[tuple[int, int]] = []  # [first, last] character index
    first = None
    for k, c in enumerate(text):
        if c == " ":
            if first is not None:
                words.append((first, k - 1))
                first = None
            continue
        if first is None:
            first = k
        if cut[k]:
            words.append((first, k))
            first = None
    if first is not None:
        words.append((first, len(text) - 1))
    if not words:
        return text, []
    # a word reaches most of a character pitch beyond its outer steps, never past the middle of
    # the gap to its neighbour; the first and last words reach the ends of the line's box
    starts = np.array([steps.start[a] for a, _ in words], np.float64)
    ends = np.array([steps.end[b] + 1 for _, b in words], np.float64)
    pitch = _pitch(steps)
    lo = starts - 0.75 * pitch
    hi = ends + 0.75 * pitch
    lo[0], hi[-1] = 0.0, span
    if len(words) > 1:
        mid = (ends[:-1] + starts[1:]) * 0.5
        lo[1:] = np.maximum(lo[1:], mid)
        hi[:-1] = np.minimum(hi[:-1], mid)
    lo = np.clip(lo, 0, span) / span
    hi = np.clip(hi, 0, span) / span
    spans = []
    for (a, b), u0, u1 in zip(words, lo, hi, strict=True):
        spans.append(WordSpan(text[a : b + 1], float(u0), float(max(u1, u0)), float(steps.conf[a : b + 1].mean())))
    return " ".join(w.text for w in spans) if cut.any() else text, spans


def _pitch(steps: CharSteps) -> float:
    """Median step distance between neighbouring characters (at least one step)."""
    if len(steps.start) < 2:
        return max(steps.end[0] - steps.start[0] + 1, 1) if len(steps.start) else 1.0
    return float(max(small_median(np.diff(steps.start)), 1.0))


def is_vertical(poly: list[list[float]] | np.ndarray) -> bool:
    """Whether the crop of this quad was turned 90 degrees for recognition (as crop_quad does)."""
    # plain floats: called once per line of every page, numpy's per-call overhead was most of
    # the layout stage's time on the GPU path
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = ((float(p[0]), float(p[1])) for p in poly)
    w = max(math.hypot(x0 - x1, y0 - y1), math.hypot(x2 - x3, y2 - y3), 1.0)
    h = max(math.hypot(x0 - x3, y0 - y3), math.hypot(x1 - x2, y1 - y2), 1.0)
    return h / w >= VERTICAL_RATIO


def segment_quad(poly: list[list[float]] | np.ndarray, u0: float, u1: float, angle: int = 0,
                 vertical: bool | None = None) -> list[list[float]]:
    """The part u0..u1 (fractions along the reading direction) of a line quad, corners ordered
    like the line's (tl, tr, br, bl in the image)."""
    q = np.asarray(poly, np.float64)
    if angle == 180:
        u0, u1 = 1.0 - u1, 1.0 - u0
    if vertical is None:
        vertical = is_vertical(q)
    tl, tr, br, bl = q
    if vertical:  # text runs top to bottom along the left (tl->bl) and right (tr->br) edges
        return [list(tl + u0 * (bl - tl)), list(tr + u0 * (br - tr)),
                list(tr + u1 * (br - tr)), list(tl + u1 * (bl - tl))]
    return [list(tl + u0 * (tr - tl)), list(tl + u1 * (tr - tl)),
            list(bl + u1 * (br - bl)), list(bl + u0 * (br - bl))]


def line_words(line: Line, steps: CharSteps, rule: SpaceRule = DEFAULT_SPACE_RULE) -> tuple[str, list[Word]]:
    """The line's text with missing spaces and its words as page quads."""
    text, spans = split_words(steps, rule)
    vertical = is_vertical(line.poly)
    words = [Word(w.text, [[float(x), float(y)] for x, y in segment_quad(line.poly, w.u0, w.u1, line.angle, vertical)],
                  w.score) for w in spans]
    return text, words


def fill_words(lines: list[Line], steps: list[CharSteps | None], rule: SpaceRule = DEFAULT_SPACE_RULE) -> None:
    """Set ``words`` (and the text, with inserted spaces) of every line that has steps."""
    if len(steps) != len(lines):
        raise ValueError(f"steps: {len(steps)} entries for {len(lines)} lines (one per line, in page order)")
    for ln, st in zip(lines, steps, strict=True):
        if st is None or st.text != ln.text:
            continue  # steps of another text (the line was edited after recognition): no words
        ln.text, ln.words = line_words(ln, st, rule)
