"""Metric code on hand-made cases whose answers are worked out by hand."""

from __future__ import annotations

import pytest

from ocrforge.evaluation.metrics import (
    cer,
    char_errors,
    match_lines,
    normalize_text,
    poly_iou,
    prf,
)


def box(x0: float, y0: float, x1: float, y1: float) -> list[list[float]]:
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


def test_normalize_nfkc_and_whitespace_only():
    assert normalize_text("  ＡＢＣ：１２\t\n x  ") == "ABC:12 x"
    assert normalize_text("Total") == "Total"  # case kept by default
    assert normalize_text("Total", casefold=True) == "total"
    # full-width forms (U+FF0C comma) fold to ASCII, the ideographic full stop U+3002 does not
    assert normalize_text("，。") == ",。"


def test_char_errors_known_values():
    assert char_errors("abc", "abd") == (1, 3)
    assert char_errors("abc", "") == (3, 3)
    assert char_errors("", "xy") == (2, 0)
    assert char_errors("kitten", "sitting") == (3, 6)
    assert char_errors("中文识别", "中文识列") == (1, 4)
    assert char_errors("a  b", "a b") == (0, 3)  # whitespace runs collapse
    assert char_errors("TOTAL", "Total") == (4, 5)
    assert char_errors("TOTAL", "Total", casefold=True) == (0, 5)
    assert cer("abcd", "abXd") == pytest.approx(0.25)
    assert cer("", "") == 0.0
    assert cer("", "x") == 1.0


def test_poly_iou_known_values():
    a = box(0, 0, 10, 10)
    assert poly_iou(a, a) == pytest.approx(1.0)
    assert poly_iou(a, box(5, 0, 15, 10)) == pytest.approx(50 / 150)
    assert poly_iou(a, box(20, 20, 30, 30)) == 0.0
    assert poly_iou(a, box(0, 0, 10, 5)) == pytest.approx(0.5)
    # corners given in a self-intersecting order are repaired, not a crash
    bow = [[0, 0], [10, 10], [10, 0], [0, 10]]
    assert 0.0 <= poly_iou(bow, a) <= 1.0
    # degenerate (zero area) polygons have IoU 0
    assert poly_iou([[0, 0], [10, 0], [10, 0], [0, 0]], a) == 0.0


def test_match_one_to_one_greedy_by_iou():
    refs = [box(0, 0, 100, 20), box(0, 30, 100, 50)]
    hyps = [
        box(0, 0, 70, 20),    # IoU 0.7 with ref 0
        box(0, 0, 95, 20),    # IoU 0.95 with ref 0 -> wins
        box(0, 31, 100, 50),  # IoU 0.95 with ref 1
        box(300, 300, 310, 310),  # nothing
    ]
    m = match_lines(refs, hyps)
    assert [(r, h) for r, h, _ in m.pairs] == [(0, 1), (1, 2)]
    assert (m.tp, m.fp, m.fn) == (2, 2, 0)
    p, r, f = prf(m.tp, m.n_hyp, m.n_ref)
    assert (p, r, f) == pytest.approx((0.5, 1.0, 2 / 3))


def test_match_threshold_is_inclusive_at_half():
    m = match_lines([box(0, 0, 10, 10)], [box(0, 0, 10, 5)])
    assert m.tp == 1
    m = match_lines([box(0, 0, 10, 10)], [box(0, 0, 10, 4.9)])
    assert (m.tp, m.fp, m.fn) == (0, 1, 1)


def test_ignore_regions_are_dont_care():
    refs = [box(0, 0, 100, 20), box(0, 100, 200, 200)]
    ignore = [False, True]
    hyps = [
        box(0, 0, 100, 20),       # TP
        box(10, 110, 90, 130),    # inside the ignore region -> not a FP
        box(150, 180, 300, 220),  # only partly (1/8) inside -> FP
    ]
    m = match_lines(refs, hyps, ignore)
    assert m.n_ref == 1  # the ignore region is never a miss
    assert m.ignored_hyp == [1]
    assert (m.tp, m.fp, m.fn) == (1, 1, 0)
    # a hypothesis never matches an ignore region itself
    m = match_lines([box(0, 0, 10, 10)], [box(0, 0, 10, 10)], [True])
    assert (m.tp, m.fp, m.fn, m.n_ref) == (0, 0, 0, 0)


def test_match_rejects_bad_mask_and_handles_empty():
    with pytest.raises(ValueError):
        match_lines([box(0, 0, 1, 1)], [], [True, False])
    m = match_lines([], [])
    assert (m.tp, m.fp, m.fn) == (0, 0, 0)
    assert prf(0, 0, 0) == (1.0, 1.0, 1.0)
    assert prf(0, 0, 3) == (1.0, 0.0, 0.0)


def test_align_order_follows_reference_lines():
    from ocrforge.evaluation.metrics import align_order

    refs = [box(0, 0, 50, 20), box(100, 15, 150, 35), box(0, 30, 50, 50)]
    rank = [0, 1, 2]
    hyps = [box(0, 31, 50, 50), box(300, 300, 320, 320), box(101, 22, 150, 42), box(0, 0, 25, 20), box(26, 0, 50, 20)]
    # split line (3, 4) keeps left-to-right; the stray box goes after its nearest reference (ref 1)
    assert align_order(refs, rank, hyps) == [3, 4, 2, 1, 0]
    assert align_order(refs, rank, []) == []
    assert align_order([], [], [box(0, 10, 5, 15), box(0, 0, 5, 5)]) == [1, 0]


def test_word_errors_count_glued_words():
    from ocrforge.evaluation.metrics import word_errors

    assert word_errors("Invoice number 2026", "Invoice number 2026") == (0, 3)
    assert word_errors("Invoice number 2026", "Invoice number2026") == (2, 3)  # 1 substitution + 1 deletion
    assert word_errors("a  b", " a b ") == (0, 2)  # whitespace runs are one separator


def test_kendall_tau_and_order_tau():
    from ocrforge.evaluation.metrics import kendall_tau, order_tau

    assert kendall_tau([0, 1, 2, 3]) == 1.0
    assert kendall_tau([3, 2, 1, 0]) == -1.0
    assert kendall_tau([0, 2, 1, 3]) == pytest.approx(4 / 6)
    assert kendall_tau([1, 1]) is None and kendall_tau([5]) is None
    assert kendall_tau([0, 0, 1]) == 1.0  # ties (a line split in two) are left out
    refs = [box(0, 0, 50, 20), box(60, 0, 110, 20), box(0, 30, 50, 50)]
    # hypothesis read the right column first, and one line overlaps nothing
    assert order_tau(refs, [0, 1, 2], [box(60, 0, 110, 20), box(0, 0, 50, 20), box(0, 30, 50, 50),
                                       box(500, 500, 510, 510)]) == pytest.approx(1 / 3)


def test_cell_f1_counts_position_and_text():
    from ocrforge.evaluation.metrics import cell_f1

    ref = [(0, 0, "Name"), (0, 1, "Qty"), (1, 0, "Apple"), (1, 1, "3"), (2, 0, ""), (2, 1, "4")]
    hyp = [(0, 0, "Name"), (0, 1, "Q ty"), (1, 0, "Apple"), (1, 1, "8"), (2, 1, "4"), (2, 2, "x")]
    assert cell_f1(ref, hyp) == (4, 5, 6)  # spaces ignored; empty cells left out; (1, 1) wrong
