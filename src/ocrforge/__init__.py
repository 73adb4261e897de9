"""ocrforge: fast, honest local OCR for Chinese and English."""

from ocrforge.config import EngineConfig, load_profile, save_profile
from ocrforge.engine import OCR, read
from ocrforge.io.inputs import InputError
from ocrforge.models.registry import ModelFileError
from ocrforge.result import Line, Page

__version__ = "0.1.0"

__all__ = [
    "OCR",
    "EngineConfig",
    "InputError",
    "Line",
    "ModelFileError",
    "Page",
    "load_profile",
    "read",
    "save_profile",
    "__version__",
]
