"""Look up built runtime artifacts (FP16 / INT8 variants of the reference ONNX models).

Only looks: building is `ocrforge build` (ocrforge.optimize.artifacts), never engine
construction. Layout of ``cache_dir()/artifacts``::

    <role>-<sha12>-<precision>-<recipe12>.onnx    the artifact
    <role>-<sha12>-<precision>-<recipe12>.json    how it was built, its CER delta and speed
    <role>-<sha12>-<precision>.current            name of the artifact used by default
"""

from __future__ import annotations

from pathlib import Path

from ocrforge.models.registry import sha256_of
from ocrforge.paths import cache_dir

PRECISIONS = ("fp16", "int8", "int8-dynamic")


class ArtifactMissing(RuntimeError):
    """A precision variant was asked for that has not been built; the message names the command."""


def artifacts_dir() -> Path:
    d = cache_dir() / "artifacts"
    d.mkdir(parents=True, exist_ok=True)
    return d


def artifact_stem(role: str, sha: str, precision: str) -> str:
    return f"{role}-{sha[:12]}-{precision}"


def current_artifact(role: str, model_path: Path, precision: str) -> Path | None:
    sha = sha256_of(Path(model_path))
    ptr = artifacts_dir() / (artifact_stem(role, sha, precision) + ".current")
    if ptr.is_file():
        p = artifacts_dir() / ptr.read_text(encoding="utf-8").strip()
        if p.is_file():
            return p
    return None


def artifact_path(role: str, model_path: Path, precision: str, model_set: str) -> Path:
    """The built ``precision`` variant of one network, or ArtifactMissing naming the build command."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of fp32, {', '.join(PRECISIONS)}, not {precision!r}")
    found = current_artifact(role, model_path, precision)
    if found is None:
        raise ArtifactMissing(
            f"no {precision} {role} model has been built for model set {model_set!r} "
            f"(looked in {artifacts_dir()}). Build it once with: ocrforge build --precision "
            f"{precision} --role {role} --model-set {model_set}")
    return found
