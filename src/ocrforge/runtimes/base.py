"""The small protocol every runtime implements."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Runtime(Protocol):
    """Runs one network: a float32 NCHW batch in, the first output as float32 out."""

    name: str
    precision: str
    device: str

    def run(self, batch: np.ndarray) -> np.ndarray: ...
