"""Layout stage: an assembled Page gets words, blocks, tables and its lines in reading order.

``analyze(page, image=..., steps=...)`` runs after page assembly:

1. words: each line's CTC character steps give its words (boxes on the page) and the spaces the
   recognition model left out (``layout.words``);
2. the page's skew; every later step works on line boxes in the deskewed frame (``layout.rows``);
3. tables: ruled ones from the page image (when given), unruled ones from aligned columns
   (``layout.tables``); a table is one unit for the reading order, read row by row inside;
4. running headers and footers (``layout.blocks``);
5. reading order of the remaining lines and the tables: XY-cut with page-wide elements masked
   first (``layout.reading_order``);
6. blocks: headers, paragraphs, titles, lists, tables, footers, in reading order.

``page.lines`` is reordered in place; ``Block.lines`` and ``Cell.lines`` index the new order.

What a runner hands over, per page, after assembling it (lines in any order, drop_score applied):

- ``image``: the page pixels the line polygons refer to (BGR or grey numpy array); optional, only
  ruled tables need it;
- ``steps``: for every line of ``page.lines``, in the same order, the ``CharSteps`` of its crop (or
  None for a line without them). On the CPU path: per recognition batch,
  ``CTCDecoder.decode_steps(probs, content_widths, batch_width)`` instead of ``CTCDecoder(probs)``,
  with ``content_widths[i] = RecPreprocessor.target_width(crop_i)`` and ``batch_width =
  batch.shape[3]``. Where argmax runs elsewhere (the GPU path), ``CTCDecoder.collapse_steps(idx,
  conf, space_prob, content_steps)`` takes the same argmax indices and probabilities as
  ``collapse`` plus the space class's probability per step (``probs[:, :, ctc.space_index]``, B x
  T) and ``content_steps[i] = T * target_width_i / batch_width``. A line turned by the orientation
  classifier keeps ``Line.angle = 180``; the words account for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ocrforge.layout.blocks import headers_footers, line_ems, paragraphs, typical_line_gap
from ocrforge.layout.reading_order import reading_order as order_units
from ocrforge.layout.rows import deskewed_boxes, median_height, page_skew, rotate_box_back
from ocrforge.layout.tables import (
    Grid,
    fill_table,
    find_ruled_grids,
    find_unruled_grids,
    table_to_html,
    table_to_markdown,
    units_inside,
)
from ocrforge.layout.words import DEFAULT_SPACE_RULE, SpaceRule, fill_words
from ocrforge.result import Block, Page, Table
from ocrforge.stages.recognize import CharSteps

__all__ = ["DEFAULT_SPACE_RULE", "SpaceRule", "analyze", "table_to_html", "table_to_markdown"]


def analyze(page: Page, *, image: np.ndarray | None = None, steps: Sequence[CharSteps | None] | None = None,
            spaces: SpaceRule = DEFAULT_SPACE_RULE, tables: bool = True, order: bool = True,
            **_: Any) -> Page:
    """Fill ``page``'s words, blocks and reading order in place and return it.

    ``image``: the page image (BGR or grey, the pixels the lines' polygons refer to); without it
    only unruled tables are found. ``steps``: one ``CharSteps`` (or None) per line of
    ``page.lines``, in that order, from ``CTCDecoder.decode_steps``; without them lines get no
    words and no spaces are added. ``spaces``: the missing-space rule (``SpaceRule(enabled=False)``
    keeps the recognised text as is). ``tables``/``order``: turn table finding / reordering off.
    """
    if steps is not None:
        fill_words(page.lines, list(steps), spaces)
    lines = page.lines
    n = len(lines)
    if n == 0:
        page.blocks = []
        return page
    angle = page_skew(lines)
    boxes = deskewed_boxes(lines, angle)
    h = median_height(boxes)
    free = list(range(n))
    found: list[tuple[Table, list[int], tuple[float, float, float, float]]] = []
    if tables:
        grids: list[Grid] = []
        if image is not None:
            for g in find_ruled_grids(image, angle, h):
                g.units = units_inside(g, boxes, free)
                if g.units:
                    grids.append(g)
                    free = [i for i in free if i not in set(g.units)]
        for g in find_unruled_grids(boxes, free, h):
            grids.append(g)
            free = [i for i in free if i not in set(g.units)]
        word_boxes = _word_boxes(page, angle)
        for g in grids:
            table, inner = fill_table(g, lines, boxes, word_boxes, g.units)
            found.append((table, inner, g.bbox))
    head, foot = headers_footers(boxes, free, float(page.height or boxes[:, 3].max()), h)
    body = [i for i in free if i not in set(head) | set(foot)]
    # units: body lines, then one per table (its grid's box)
    unit_boxes = np.concatenate([boxes[body], np.array([t[2] for t in found], np.float64).reshape(-1, 4)])
    unit_order = order_units(unit_boxes, h) if order else list(range(len(unit_boxes)))
    sequence: list[int] = list(head)
    blocks: list[tuple[str, list[int], Table | None]] = [("header", list(head), None)] if head else []
    line_gap = typical_line_gap(boxes, [body[u] for u in unit_order if u < len(body)], h)
    texts = [ln.text for ln in lines]
    ems = line_ems(boxes, texts)
    run: list[int] = []

    def flush() -> None:
        for kind, blk in paragraphs(boxes, run, texts, h, line_gap, body, ems):
            blocks.append((kind, blk, None))
        run.clear()

    for u in unit_order:
        if u < len(body):
            run.append(body[u])
            sequence.append(body[u])
            continue
        flush()
        table, inner, _ = found[u - len(body)]
        blocks.append(("table", inner, table))
        sequence.extend(inner)
    flush()
    if foot:
        blocks.append(("footer", list(foot), None))
        sequence.extend(foot)
    if not order:
        sequence = list(range(n))
    _apply(page, sequence, blocks, boxes, angle)
    return page


def _word_boxes(page: Page, angle: float) -> dict[int, np.ndarray]:
    """Deskewed boxes of every line's words (lines without words left out)."""
    out = {}
    for i, ln in enumerate(page.lines):
        if ln.words:
            out[i] = deskewed_boxes(ln.words, angle)  # Words have .poly like Lines
    return out


def _apply(page: Page, sequence: list[int], blocks: list[tuple[str, list[int], Table | None]],
           boxes: np.ndarray, angle: float) -> None:
    """Reorder page.lines by ``sequence`` and store the blocks with indices into the new order."""
    seen: set[int] = set()
    seq = [i for i in sequence if not (i in seen or seen.add(i))]
    seq += [i for i in range(len(page.lines)) if i not in seen]  # nothing is ever dropped
    new_index = {old: new for new, old in enumerate(seq)}
    page.lines = [page.lines[i] for i in seq]
    out = []
    for kind, members, table in blocks:
        if not members:
            continue
        if table is not None:
            for cell in table.cells:
                cell.lines = [new_index[i] for i in cell.lines]
                cell.bbox = rotate_box_back(cell.bbox, angle)
        b = boxes[members]
        bbox = rotate_box_back((b[:, 0].min(), b[:, 1].min(), b[:, 2].max(), b[:, 3].max()), angle)
        if table is not None:
            xs = [c.bbox for c in table.cells]
            bbox = (min(x[0] for x in xs), min(x[1] for x in xs), max(x[2] for x in xs), max(x[3] for x in xs))
        out.append(Block(kind, tuple(round(v, 1) for v in bbox), sorted(new_index[i] for i in members), table))
    page.blocks = out
