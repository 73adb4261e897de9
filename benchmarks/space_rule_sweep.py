"""Tune the missing-space rule (ocrforge.layout.words.SpaceRule) on labeled lines.

    python benchmarks/space_rule_sweep.py collect DATASET OUT.pkl   # read once, keep CTC steps
    python benchmarks/space_rule_sweep.py sweep OUT.pkl[,MORE.pkl] # score rules on the kept lines

``collect`` detects and recognises every page of a labeled data set with the default engine,
keeping each detected line's CTC character steps and the text of the reference line it matches
(polygon IoU >= 0.5; unmatched lines are left out). ``sweep`` scores the rule on those lines:
word accuracy (whitespace tokens, spaces counted) and CER between each line's text after the rule
and its reference, first for each pair class alone, then jointly over a grid. Only lines with a
candidate pair are re-scored per rule (the others do not change), so a grid runs in seconds.
"""

from __future__ import annotations

import itertools
import pickle
import sys

import numpy as np
from rapidfuzz.distance import Levenshtein

from ocrforge.evaluation.metrics import normalize_text
from ocrforge.layout.words import SpaceRule, char_class, char_width, split_words


def collect(dataset: str, out: str) -> None:
    from ocrforge import OCR
    from ocrforge.evaluation.dataset import load_dataset
    from ocrforge.evaluation.metrics import match_lines
    from ocrforge.io.inputs import iter_pages
    from ocrforge.result import to_input_frame

    runner = OCR().runner
    s = runner.settings(None)
    rows = []
    for r in load_dataset(dataset):
        if r.lines is None:
            continue
        det = runner.detect([next(iter_pages(str(r.image)))], s)[0]
        quads = det.quads[:-1] if det.whole_image else det.quads
        res, _ = runner.recognize_crops(det.crops[: len(quads)], steps=True)
        # a page the orientation stage turned has its quads in the upright frame; the labels
        # are in the frame of the image as stored
        h, w = det.page.image.shape[:2]
        polys = [to_input_frame(q, det.page.rotation, w, h).tolist() for q in quads]
        m = match_lines([ln.poly for ln in r.lines], polys, [ln.ignore for ln in r.lines])
        ref = {h: r.lines[ri].text for ri, h, _ in m.pairs}
        for h, st in enumerate(res):
            rows.append({"image": r.name, "lang": r.lang, "kind": r.kind, "steps": st, "ref": ref.get(h),
                         "rotation": det.page.rotation})
        print(f"  {r.name}: {len(quads)} lines", file=sys.stderr, flush=True)
    with open(out, "wb") as f:
        pickle.dump(rows, f)


def _group(rule_pair: tuple[str, str]) -> str | None:
    """The SpaceRule field that decides a pair of character classes (None: never a space)."""
    probe = SpaceRule(latin=(0, 0), cjk_latin=(1, 1), punct=(2, 2))
    th = probe.thresholds(*rule_pair)
    return None if th is None else {0: "latin", 1: "cjk_latin", 2: "punct"}[int(th[0])]


def candidates(st) -> list[tuple[int, str, float, float]]:
    """(index, rule field, space probability, excess in em) of every pair the rule could split;
    the same quantities as ``words.missing_spaces``."""
    text = st.text
    if len(text) < 3 or st.gap_space is None:
        return []
    center = (st.start + st.end + 1) * 0.5
    width = np.array([char_width(c) for c in text])
    ns = np.array([c != " " for c in text])
    adj = ns[:-1] & ns[1:]
    if adj.sum() < 2:
        return []
    exp = (width[:-1] + width[1:]) * 0.5
    act = np.diff(center)
    em = float(np.median(act[adj] / exp[adj]))
    if em <= 0:
        return []
    ex = act / em - exp
    out = []
    for k in np.flatnonzero(adj & (st.gap_space > 0)):
        g = _group((char_class(text[k]), char_class(text[k + 1])))
        if g:
            out.append((int(k), g, float(st.gap_space[k]), float(ex[k])))
    return out


def sweep(paths: str) -> None:
    rows = [r for p in paths.split(",") for r in pickle.load(open(p, "rb")) if r["ref"] is not None]
    fixed = [0, 0, 0, 0]  # word edits, words, char edits, chars of lines without candidates
    lines = []
    for r in rows:
        cf = r["kind"] == "receipt"
        ref = normalize_text(r["ref"], cf)
        cands = candidates(r["steps"])
        if cands:
            lines.append((r["steps"].text, ref, cands, cf))
        else:
            hyp = normalize_text(r["steps"].text, cf)
            fixed[0] += Levenshtein.distance(ref.split(), hyp.split())
            fixed[1] += len(ref.split())
            fixed[2] += Levenshtein.distance(ref, hyp)
            fixed[3] += len(ref)

    def score(th: dict[str, tuple[float, float]]) -> tuple[float, float]:
        we, wn, ce, cn = fixed
        for text, ref, cands, cf in lines:
            ks = sorted(k for k, g, p, e in cands if g in th and p > th[g][0] and e > th[g][1])
            for k in reversed(ks):
                text = text[: k + 1] + " " + text[k + 1 :]
            hyp = normalize_text(text, cf)
            we += Levenshtein.distance(ref.split(), hyp.split())
            wn += len(ref.split())
            ce += Levenshtein.distance(ref, hyp)
            cn += len(ref)
        return 1 - we / wn, ce / cn

    print(f"{len(rows)} matched lines ({len(lines)} with candidate pairs)")
    a0, c0 = score({})
    print(f"no rule: word acc {a0:.4f}, CER {c0:.4f}")
    for g in ("latin", "cjk_latin", "punct"):
        res = sorted(((score({g: (p, e)}), p, e) for p in (0.01, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5)
                      for e in (-0.1, 0.0, 0.1, 0.2, 0.3)), key=lambda t: (-t[0][0], t[0][1]))
        print(f"{g} alone, best 3:", ", ".join(f"({p}, {e}): {a:.4f}/{c:.4f}" for (a, c), p, e in res[:3]))
    grid = itertools.product([0.15, 0.2, 0.3, 0.5, None], [0.2, 0.3, 0.4], [0.005, 0.01, 0.02, None], [0.15, 0.2, 0.25])
    res = []
    for lp, le, cp, ce in grid:
        th = {k: v for k, v in (("latin", (lp, le)), ("cjk_latin", (cp, ce))) if v[0] is not None}
        res.append((score(th), lp, le, cp, ce))
    res.sort(key=lambda t: (-t[0][0], t[0][1]))
    print("joint, best 5 (latin prob, em, cjk_latin prob, em): word acc / CER")
    for (a, c), lp, le, cp, ce in res[:5]:
        print(f"  {lp} {le} {cp} {ce}: {a:.4f} / {c:.4f}")
    for name, th in (("latin only (0.2, 0.3)", {"latin": (0.2, 0.3)}),
                     ("latin (0.2, 0.3) + cjk_latin (0.01, 0.2)", {"latin": (0.2, 0.3), "cjk_latin": (0.01, 0.2)})):
        a, c = score(th)
        print(f"{name}: word acc {a:.4f}, CER {c:.4f}")
    a, c, n = score_texts([(split_words(r["steps"])[0], r) for r in rows])
    print(f"default rule (SpaceRule()): word acc {a:.4f}, CER {c:.4f} ({n} reference words)")


def score_texts(pairs: list) -> tuple[float, float, int]:
    """Word accuracy and CER of (text, row) pairs against the rows' reference lines."""
    we = wn = ce = cn = 0
    for text, r in pairs:
        cf = r["kind"] == "receipt"
        ref, hyp = normalize_text(r["ref"], cf), normalize_text(text, cf)
        we += Levenshtein.distance(ref.split(), hyp.split())
        wn += len(ref.split())
        ce += Levenshtein.distance(ref, hyp)
        cn += len(ref)
    return 1 - we / wn, ce / cn, wn


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "collect":
        collect(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "sweep":
        sweep(sys.argv[2])
    else:
        print(__doc__)
        raise SystemExit(2)
