"""The median of the few values a line or a block has (a line's character pitches, a block's
line heights). np.median costs ~25 us a call whatever the size, mostly argument handling, and
layout calls it ~100 times a page; sorting a short array and taking the middle is several times
faster and gives the same float (the mean of the middle two, as np.median computes it)."""

from __future__ import annotations

from typing import Any

import numpy as np


def small_median(values: Any) -> float:
    """np.median of a 1-D sequence as a float (nan for no values or any nan, as np.median)."""
    a = np.asarray(values).ravel()
    # np.median averages the middle two in the input's float type (float32 stays float32)
    a = np.sort(a if a.dtype.kind == "f" else a.astype(np.float64))
    n = len(a)
    if n == 0 or np.isnan(a[-1]):
        return float("nan")
    m = n // 2
    return float(a[m]) if n % 2 else float((a[m - 1] + a[m]) / 2.0)
