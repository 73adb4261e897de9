"""ocrforge: fast, honest local OCR for Chinese and English."""

import os as _os

# ONNX Runtime's official builds send usage events and keep a device id under
# ~/.cache/Microsoft/DeveloperTools/.onnxruntime unless this is set before it initializes.
# A local OCR tool sends nothing: off unless the user sets ORT_DISABLE_TELEMETRY=0 themselves.
_os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

from ocrforge.config import EngineConfig, load_profile, save_profile
from ocrforge.engine import OCR, read
from ocrforge.io.inputs import InputError
from ocrforge.models.registry import ModelFileError
from ocrforge.result import Block, Cell, Line, Page, Table, Word
from ocrforge.version import __version__

__all__ = [
    "OCR",
    "Block",
    "Cell",
    "EngineConfig",
    "InputError",
    "Block",
    "Line",
    "ModelFileError",
    "Page",
    "Table",
    "Word",
    "__version__",
    "load_profile",
    "read",
    "save_profile",
    "__version__",
]
