"""Build cache for runtime artifacts (FP16 / INT8 variants of the reference ONNX models).

Layout of ``cache_dir()/artifacts``::

    <role>-<sha12>-<precision>-<recipe12>.onnx    the artifact
    <role>-<sha12>-<precision>-<recipe12>.json    how it was built, its CER delta and speed
    <role>-<sha12>-<precision>.current            name of the artifact used by default

``sha12`` is the start of the source model's sha256 and ``recipe12`` a hash of every build
option that changes the artifact, so a changed model or recipe never reuses a stale file.
Builds take a file lock, so two processes asking for the same artifact build it once; files
appear atomically (written to a temp name, then renamed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ocrforge.config import EngineConfig, atomic_write_text
from ocrforge.models.artifacts import artifact_stem, artifacts_dir, current_artifact  # noqa: F401
from ocrforge.models.registry import sha256_of
from ocrforge.paths import ENV_CACHE, cache_dir  # noqa: F401

RECIPE_VERSION = 1
from ocrforge.models.artifacts import PRECISIONS  # noqa: E402,F401

CALIB_SEED = 1001  # synth seeds: calibration, sensitivity sweep and guard pages never overlap
SWEEP_SEED = 1002
EVAL_SEED = 2001

# Nodes kept float in the default INT8 recipe of the bundled models, by model sha256 and
# sweep group name (optimize.int8.node_groups). Found with `ocrforge build --sweep`
# (docs/BENCHMARKS.md, "CPU acceleration"); an empty list means full INT8 held accuracy.
KEEP_FLOAT: dict[str, list[str]] = {
    # PP-OCRv6 small rec: the 768->384 1x1 conv closing the last MLP block (its input, after
    # GELU, has outliers); full INT8 doubled the crop CER, this one node float restored it
    "5435fd747c9e0efe15a96d0b378d5bd157e9492ed8fd80edf08f30d02fa24634": ["Conv.50"],
}


@dataclass
class BuildOptions:
    precision: str = "int8"
    method: str = "minmax"  # minmax | entropy | percentile
    calibration: str | None = None  # folder of images / dataset; None = synth pages
    calib_pages: int = 16
    keep_float: list[str] | None = None  # sweep group names; None = recipe default
    sweep: bool = False  # measure which groups must stay float (slower build)
    per_channel: bool = True
    eval: str | None = None  # labeled dataset for the guard; None = synth pages
    eval_pages: int = 30
    budget_points: float = 0.5
    force: bool = False

    def recipe(self) -> dict[str, Any]:
        import onnxruntime

        r: dict[str, Any] = {"v": RECIPE_VERSION, "precision": self.precision,
                             "ort": ".".join(onnxruntime.__version__.split(".")[:2])}
        if self.precision == "int8":
            cal = self.calibration
            if cal:
                lab = Path(cal) / "labels.jsonl"
                cal = f"{Path(cal).resolve()}:{sha256_of(lab)[:12] if lab.is_file() else ''}"
            r.update(method=self.method, calibration=cal or f"synth:{CALIB_SEED}",
                     calib_pages=self.calib_pages, per_channel=self.per_channel,
                     keep_float="sweep" if self.sweep else self.keep_float)
        return r

    def recipe_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.recipe(), sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class BuildResult:
    path: Path
    report: dict[str, Any]
    reused: bool = False
    notes: list[str] = field(default_factory=list)


def _artifacts() -> Path:
    return artifacts_dir()


def _stem(role: str, sha: str, precision: str) -> str:
    return artifact_stem(role, sha, precision)


@contextlib.contextmanager
def file_lock(name: str) -> Iterator[None]:
    """An exclusive lock between processes (flock; on Windows a best-effort no-op)."""
    lock_dir = cache_dir() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "a+") as fh:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def synth_dir(seed: int, pages: int) -> Path:
    """A synthetic labeled set kept in the cache (deterministic: same seed, same pages)."""
    from ocrforge.optimize.samples import synth_set

    d = cache_dir() / "synth" / f"seed{seed}-p{pages}"
    with file_lock(f"synth-{seed}-{pages}"):
        if not (d / "labels.jsonl").is_file():
            d.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".seed{seed}-", dir=d.parent))
            synth_set(pages, seed, tmp)
            if d.exists():
                shutil.rmtree(d)
            os.replace(tmp, d)
    return d


def _default_keep_float(sha: str) -> list[str]:
    return list(KEEP_FLOAT.get(sha, []))


def build(role: str, model_path: Path, opts: BuildOptions, cfg: EngineConfig | None = None, *,
          log: Callable[[str], None] | None = None, rebuild: bool = False) -> BuildResult:
    """Build (or reuse) the ``opts.precision`` artifact of ``role`` (det | rec | cls)."""
    from ocrforge.optimize import guard

    log = log or (lambda s: print(s, file=sys.stderr))
    cfg = cfg or EngineConfig()
    model_path = Path(model_path)
    sha = sha256_of(model_path)
    stem = f"{_stem(role, sha, opts.precision)}-{opts.recipe_hash()}"
    out = _artifacts() / f"{stem}.onnx"
    meta = _artifacts() / f"{stem}.json"
    ptr = _artifacts() / f"{_stem(role, sha, opts.precision)}.current"
    with file_lock(stem):
        if out.is_file() and meta.is_file() and not rebuild:
            atomic_write_text(ptr, out.name + "\n")
            return BuildResult(out, json.loads(meta.read_text(encoding="utf-8")), reused=True)
        refused = _artifacts() / f"{stem}.refused.json"
        if refused.is_file() and not rebuild and not opts.force:
            # the same recipe on the same model was refused before: say so without rebuilding
            rep = json.loads(refused.read_text(encoding="utf-8"))
            res = guard.GuardResult(**rep["guard"])
            raise guard.BuildRefused(
                f"{role} {opts.precision} build was refused earlier: {res.summary()} "
                f"(report {refused}; --rebuild to try again, --force to keep it)", rep)
        t_start = time.perf_counter()
        engine = guard.fp32_engine(cfg, role)
        report: dict[str, Any] = {
            "role": role, "precision": opts.precision, "source_model": str(model_path),
            "source_sha256": sha, "recipe": opts.recipe(), "options": asdict(opts),
            "model_set": cfg.models.name,
        }
        with tempfile.TemporaryDirectory(prefix="ocrforge-build-", dir=_artifacts()) as tmp:
            cand = Path(tmp) / "candidate.onnx"
            calib = _calibration(role, engine, opts, report, log)
            if opts.precision == "fp16":
                from ocrforge.optimize.fp16 import SENSITIVE_OPS, convert_fp16

                convert_fp16(model_path, cand)
                report["fp16_block_ops"] = list(SENSITIVE_OPS)
            elif opts.precision == "int8-dynamic":
                from ocrforge.optimize.int8 import preprocess, quantize_dynamic

                pre = preprocess(model_path, Path(tmp) / "pre.onnx")
                quantize_dynamic(pre, cand)
                report["dynamic_op_types"] = ["MatMul", "Gemm"]
            else:
                _build_int8(role, engine, model_path, sha, Path(tmp), cand, calib.inputs, opts, report, log)
            log(f"{role}: checking accuracy on held-out pages ...")
            eval_ds = opts.eval or guard.upright_records(synth_dir(EVAL_SEED, opts.eval_pages))
            res, _ = guard.check(role, cand, opts.precision, engine, eval_ds,
                                 opts.eval_pages if opts.eval else None, opts.budget_points)
            report["guard"] = res.to_dict()
            speed_inputs = calib.inputs[: 4 if role == "det" else 12]
            report["speed"] = guard.speed(role, cand, opts.precision, engine, speed_inputs)
            report["build_s"] = round(time.perf_counter() - t_start, 1)
            report["size_bytes"] = {"source": model_path.stat().st_size, "artifact": cand.stat().st_size}
            report["accepted"] = res.accepted
            report["forced"] = bool(opts.force and not res.accepted)
            log(f"{role} {opts.precision}: {res.summary()}; network speed-up "
                f"{report['speed']['speedup']}x")
            if not res.accepted and not opts.force:
                atomic_write_text(_artifacts() / f"{stem}.refused.json",
                                  json.dumps(report, indent=2, ensure_ascii=False) + "\n")
                raise guard.BuildRefused(
                    f"{role} {opts.precision} build refused: {res.summary()}. "
                    "Use --force to keep it anyway, or try another calibration method/set.", report)
            os.replace(cand, out)
        atomic_write_text(meta, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        atomic_write_text(ptr, out.name + "\n")
    return BuildResult(out, report)


def _calibration(role: str, engine: Any, opts: BuildOptions, report: dict[str, Any],
                 log: Callable[[str], None]):
    from ocrforge.optimize.samples import calibration_inputs, load_pages

    src = opts.calibration or str(synth_dir(CALIB_SEED, opts.calib_pages))
    images, desc = load_pages(src, opts.calib_pages)
    calib = calibration_inputs(role, engine, images, desc if opts.calibration else f"synth seed={CALIB_SEED}")
    report["calibration"] = calib.description
    log(f"{role}: calibration inputs: {calib.description}")
    return calib


def _build_int8(role: str, engine: Any, model_path: Path, sha: str, tmp: Path, cand: Path,
                inputs: list, opts: BuildOptions, report: dict[str, Any],
                log: Callable[[str], None]) -> None:
    from ocrforge.optimize.int8 import node_groups, preprocess, quantize_static

    pre = preprocess(model_path, tmp / "pre.onnx")
    groups = dict(node_groups(pre))
    if opts.sweep:
        from ocrforge.optimize.sensitivity import labeled_set, sweep

        ls = labeled_set(synth_dir(SWEEP_SEED, 12))
        log(f"{role}: sensitivity sweep on {ls.description}")
        sw = sweep(role, engine, pre, inputs, ls, method=opts.method, log=log)
        keep, exclude = sw.excluded_groups, sw.exclude
        report["sweep"] = {"dataset": ls.description, "rows": sw.rows, "chosen": keep}
    else:
        keep = opts.keep_float if opts.keep_float is not None else _default_keep_float(sha)
        from ocrforge.optimize.int8 import quantizable_nodes

        nodes = set(quantizable_nodes(pre))
        unknown = [g for g in keep if g not in groups and g not in nodes]
        if unknown:
            raise ValueError(f"unknown node group(s)/node(s) {unknown}; groups of this model: {list(groups)}")
        exclude = [n for g in keep for n in (groups[g] if g in groups else [g])]
    report["keep_float_groups"] = keep
    report["keep_float_nodes"] = len(exclude)
    log(f"{role}: INT8 static ({opts.method}, per-channel={opts.per_channel}), keep float: {keep or 'nothing'}")
    quantize_static(pre, cand, inputs, method=opts.method, exclude=exclude,
                    per_channel=opts.per_channel, cache_path=tmp / "ranges.json")
