"""Optional dependencies (pip extras): check them before a command does any work.

A command that needs an extra calls ``require`` first, so a user who installed plain
``pip install ocrforge`` gets one line naming the extra to install instead of a traceback
after minutes of work.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

# import name -> (pip extra that brings it, what it is for)
MODULES: dict[str, tuple[str, str]] = {
    "onnx": ("quant", "INT8/FP16 builds"),
    "onnxconverter_common": ("quant", "FP16 builds"),
    "fontTools": ("bench", "synthetic pages"),
    "matplotlib": ("bench", "benchmark charts"),
    "torch": ("torch", "the PyTorch runtime"),
    "fastapi": ("serve", "the HTTP service"),
    "uvicorn": ("serve", "the HTTP service"),
}

# what each extra brings (README "Install" lists the same)
EXTRAS: dict[str, str] = {
    "quant": "onnx, onnxconverter-common: `ocrforge build` (INT8/FP16 artifacts) and tune's precision axis",
    "bench": "matplotlib, fonttools: `ocrforge synth`, the bench chart, synthetic calibration pages",
    "serve": "fastapi, uvicorn, python-multipart, prometheus-client, httpx: `ocrforge serve`",
    "torch": "torch, onnx: `--runtime torch` (native PyTorch networks, CUDA)",
    "dev": "pytest, ruff, playwright: the test suite",
}


class MissingExtra(RuntimeError):
    """An optional dependency is not installed; the message names the pip extra."""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken sys.modules entry
        return False


def missing(modules: Iterable[str]) -> list[str]:
    return [m for m in modules if not installed(m)]


def install_hint(modules: Iterable[str], extra: str | None = None) -> str:
    extras = [extra] if extra else sorted({MODULES[m][0] for m in modules})
    return f"pip install 'ocrforge[{','.join(extras)}]'"


def require(what: str, modules: Iterable[str], extra: str | None = None) -> None:
    """Raise MissingExtra naming the extras when any of ``modules`` is not installed; ``extra``:
    the one extra that brings them all (torch brings onnx too: ``ocrforge[torch]``)."""
    gone = missing(modules)
    if not gone:
        return
    parts = [f"{m} (extra '{extra or MODULES[m][0]}')" for m in gone]
    raise MissingExtra(f"{what} needs {', '.join(parts)}, not installed: {install_hint(gone, extra)}")
