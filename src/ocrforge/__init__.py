"""ocrforge: fast, honest local OCR for Chinese and English."""

from ocrforge.config import EngineConfig, load_profile, save_profile
from ocrforge.engine import OCR, read
from ocrforge.io.inputs import InputError
from ocrforge.models.registry import ModelFileError
from ocrforge.result import Block, Line, Page, Word
from ocrforge.version import __version__

__all__ = [
    "OCR",
    "EngineConfig",
    "InputError",
    "Block",
    "Line",
    "ModelFileError",
    "Page",
    "Word",
    "__version__",
    "load_profile",
    "read",
    "save_profile",
    "__version__",
]
