"""Where ocrforge keeps files of its own (one source of truth, imported by every layer)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_CACHE = "OCRFORGE_CACHE_DIR"


def cache_dir() -> Path:
    """Built artifacts, compiled kernels and cached synthetic sets: OCRFORGE_CACHE_DIR, else the
    user cache folder (platformdirs; ~/.cache/ocrforge on Linux)."""
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ocrforge", appauthor=False))
