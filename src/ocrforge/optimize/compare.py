"""Any ONNX model: convert it (FP16 / INT8) and compare variants' outputs and speed with FP32.

``compare_models(reference, {"int8": path, ...}, inputs)`` returns, per variant, the max and
mean absolute error of the first output against the reference, the cosine similarity of the
flattened outputs, and the median time per input (same process, same inputs, interleaved).
``ocrforge build --model X.onnx [--compare]`` is the command line; ``ocrforge bench --model``
can call ``compare_models`` directly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from ocrforge.config import atomic_write_text


def _session(path: str | Path, threads: int = 0):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def model_input(path: str | Path) -> tuple[str, list[int | str | None], str]:
    """(name, shape with dim names for dynamic dims, element type) of the single model input."""
    s = _session(path)
    ins = s.get_inputs()
    if len(ins) != 1:
        raise ValueError(f"{path}: has {len(ins)} inputs; only single-input models are supported")
    return ins[0].name, list(ins[0].shape), ins[0].type


def parse_shape(text: str | None, model_shape: Sequence[Any], path: str | Path) -> tuple[int, ...]:
    if text:
        try:
            shape = tuple(int(v) for v in text.replace("x", ",").split(","))
        except ValueError:
            raise ValueError(f"--input-shape must be comma-separated integers, not {text!r}") from None
        if len(shape) != len(model_shape):
            raise ValueError(f"--input-shape has {len(shape)} dims, {path} expects {len(model_shape)}")
        return shape
    if all(isinstance(d, int) and d > 0 for d in model_shape[1:]):
        return (1, *[int(d) for d in model_shape[1:]])
    raise ValueError(f"{path}: input shape {model_shape} has dynamic dims; give --input-shape, e.g. 1,3,224,224")


def make_inputs(shape: tuple[int, ...], n: int, source: str | Path | None = None,
                seed: int = 0) -> list[np.ndarray]:
    """n inputs of ``shape``: .npy/.npz arrays or images (RGB, resized, scaled to 0..1, NCHW)
    from ``source``, else uniform random numbers in [0, 1)."""
    if source is None:
        rng = np.random.default_rng(seed)
        return [rng.random(shape, dtype=np.float32) for _ in range(n)]
    folder = Path(source)
    if not folder.is_dir():
        raise FileNotFoundError(f"calibration folder {folder} not found")
    files = sorted(p for p in folder.iterdir() if p.is_file())
    out: list[np.ndarray] = []
    for p in files:
        if p.suffix == ".npy":
            x = np.load(p).astype(np.float32)
        elif p.suffix == ".npz":
            with np.load(p) as z:
                x = z[z.files[0]].astype(np.float32)
        else:
            img = cv2.imread(str(p), cv2.IMREAD_COLOR)
            if img is None:
                continue
            h, w = shape[2], shape[3]
            rgb = cv2.cvtColor(cv2.resize(img, (w, h)), cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0
            x = np.repeat(rgb.transpose(2, 0, 1)[None], shape[0], axis=0)
        if x.ndim == len(shape) - 1:
            x = x[None]
        out.append(np.ascontiguousarray(x))
        if len(out) >= n:
            break
    if not out:
        raise ValueError(f"calibration folder {folder} holds no .npy/.npz arrays or images")
    return out


def compare_models(reference: str | Path, variants: dict[str, str | Path], inputs: Sequence[np.ndarray],
                   *, repeats: int = 5, threads: int = 0) -> dict[str, Any]:
    """Output error and speed of each variant against the FP32 reference on the same inputs."""
    name = _session(reference).get_inputs()[0].name
    sessions = {"fp32": _session(reference, threads)}
    sessions.update({k: _session(v, threads) for k, v in variants.items()})
    outs: dict[str, list[np.ndarray]] = {}
    times: dict[str, list[float]] = {k: [] for k in sessions}
    for k, s in sessions.items():
        s.run(None, {name: inputs[0]})  # warm-up
        outs[k] = [np.asarray(s.run(None, {name: x})[0], np.float32) for x in inputs]
    for _ in range(repeats):  # interleaved so that machine load hits every variant alike
        for k, s in sessions.items():
            t0 = time.perf_counter()
            for x in inputs:
                s.run(None, {name: x})
            times[k].append((time.perf_counter() - t0) / len(inputs))
    ref = np.concatenate([o.ravel() for o in outs["fp32"]]).astype(np.float64)
    t_ref = statistics.median(times["fp32"])
    rows: dict[str, Any] = {}
    for k in sessions:
        got = np.concatenate([o.ravel() for o in outs[k]]).astype(np.float64)
        diff = np.abs(got - ref)
        denom = np.linalg.norm(ref) * np.linalg.norm(got)
        t = statistics.median(times[k])
        rows[k] = {"max_abs_err": float(diff.max()), "mean_abs_err": float(diff.mean()),
                   "cosine": float(ref @ got / denom) if denom else 1.0,
                   "ms_per_input": round(t * 1000, 3), "speedup": round(t_ref / t, 3),
                   "path": str(reference if k == "fp32" else variants[k])}
    return {"inputs": len(inputs), "input_shape": list(inputs[0].shape), "repeats": repeats,
            "threads": threads, "variants": rows}


def convert(src: Path, dst: Path, precision: str, calib: Sequence[np.ndarray], method: str = "minmax") -> Path:
    from ocrforge.optimize import int8
    from ocrforge.optimize.fp16 import convert_fp16

    if precision == "fp16":
        return convert_fp16(src, dst)
    with tempfile.TemporaryDirectory(prefix="ocrforge-generic-") as tmp:
        pre = int8.preprocess(src, Path(tmp) / "pre.onnx")
        if precision == "int8-dynamic":
            return int8.quantize_dynamic(pre, dst)
        return int8.quantize_static(pre, dst, calib, method=method)


def run_generic(args: argparse.Namespace) -> int:
    """`ocrforge build --model X.onnx`: convert, guard by output cosine, optionally compare all."""
    from ocrforge.models.registry import sha256_of
    from ocrforge.optimize.artifacts import cache_dir

    src = Path(args.model)
    if not src.is_file():
        raise FileNotFoundError(f"model {src} not found")
    _, mshape, mtype = model_input(src)
    if "float" not in mtype:
        raise ValueError(f"{src}: input type {mtype}; only float inputs are supported")
    shape = parse_shape(args.input_shape, mshape, src)
    n = max(2, args.calib_samples)
    calib = make_inputs(shape, n, args.calibration, seed=0)
    held = make_inputs(shape, 8, None, seed=1) if args.calibration is None else calib[-4:]
    precisions = ["fp16", "int8", "int8-dynamic"] if args.compare else [args.build_precision]
    sha = sha256_of(src)
    out_dir = cache_dir() / "artifacts"
    built: dict[str, Path] = {}
    for prec in precisions:
        key = hashlib.sha256(json.dumps([prec, args.method, str(args.calibration), n, list(shape)]).encode()).hexdigest()[:12]
        dst = out_dir / f"generic-{src.stem}-{sha[:12]}-{prec}-{key}.onnx"
        if not dst.is_file() or args.rebuild:
            dst.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
                cand = convert(src, Path(tmp) / "cand.onnx", prec, calib, args.method)
                shutil.move(str(cand), dst)
        built[prec] = dst
    report = compare_models(src, built, held)
    report.update(source=str(src), source_sha256=sha, calibration=str(args.calibration or "random uniform [0,1)"),
                  calib_inputs=len(calib), min_cosine=args.min_cosine)
    refused = []
    print(f"{'variant':14s} {'max|err|':>10s} {'mean|err|':>10s} {'cosine':>9s} {'ms/input':>9s} {'speed-up':>8s}")
    for k, r in report["variants"].items():
        print(f"{k:14s} {r['max_abs_err']:10.4g} {r['mean_abs_err']:10.4g} {r['cosine']:9.5f} "
              f"{r['ms_per_input']:9.2f} {r['speedup']:7.2f}x")
        if k != "fp32" and r["cosine"] < args.min_cosine:
            refused.append(k)
    for prec, path in built.items():
        rep = {**report, "precision": prec, "accepted": prec not in refused,
               "forced": prec in refused and args.force}
        atomic_write_text(path.with_suffix(".json"), json.dumps(rep, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    if refused and not args.force:
        for prec in refused:
            built[prec].unlink(missing_ok=True)
        print(f"ocrforge: refused {', '.join(refused)}: output cosine below {args.min_cosine} "
              "(use --force to keep, or give real --calibration inputs)", file=sys.stderr)
    if args.output:
        prec = args.build_precision
        if prec in refused and not args.force:
            return 1
        if prec not in built:
            raise ValueError(f"--output: {prec} was not built")
        from ocrforge.config import atomic_write_bytes

        atomic_write_bytes(args.output, built[prec].read_bytes())
        print(f"wrote {args.output}")
    else:
        for prec, path in built.items():
            if prec not in refused or args.force:
                print(f"{prec}: {path}")
    return 1 if refused and not args.force else 0
