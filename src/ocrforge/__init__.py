"""ocrforge: fast, honest local OCR for Chinese and English."""

from ocrforge.config import EngineConfig, load_profile, save_profile
from ocrforge.engine import OCR, read
from ocrforge.io.inputs import InputError
from ocrforge.models.registry import ModelFileError
from ocrforge.result import Block, Cell, Line, Page, Table, Word

__version__ = "0.1.0"

__all__ = [
    "OCR",
    "Block",
    "Cell",
    "EngineConfig",
    "InputError",
    "Line",
    "ModelFileError",
    "Page",
    "Table",
    "Word",
    "load_profile",
    "read",
    "save_profile",
    "__version__",
]
