"""Layout stage: words, rows, blocks, reading order and tables of an assembled Page."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ocrforge.layout.words import DEFAULT_SPACE_RULE, SpaceRule, fill_words
from ocrforge.result import Page
from ocrforge.stages.recognize import CharSteps


def analyze(page: Page, *, image: np.ndarray | None = None, steps: Sequence[CharSteps | None] | None = None,
            spaces: SpaceRule = DEFAULT_SPACE_RULE, **_: Any) -> Page:
    """Fill the page's words, blocks and reading order (in place; the page is returned)."""
    if steps is not None:
        fill_words(page.lines, list(steps), spaces)
    return page
