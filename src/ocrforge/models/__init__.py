"""Model registry (files, hashes, dictionaries, constants) and native architectures."""

from ocrforge.models.registry import (
    MODEL_SETS,
    ModelFile,
    ModelFileError,
    ModelSet,
    ResolvedModels,
    get_model_set,
    resolve_models,
)

__all__ = [
    "MODEL_SETS",
    "ModelFile",
    "ModelFileError",
    "ModelSet",
    "ResolvedModels",
    "get_model_set",
    "resolve_models",
]
