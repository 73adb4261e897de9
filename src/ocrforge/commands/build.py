"""`ocrforge build`: FP16 / INT8 runtime artifacts, checked against the FP32 reference.

    ocrforge build --precision int8                     # det, rec and cls of the model set
    ocrforge build --precision int8 --role rec --method entropy --calibration my_scans/
    ocrforge build --precision int8 --role rec --sweep  # measure which layers must stay float
    ocrforge build --model net.onnx --precision int8 --input-shape 1,3,224,224 --compare
"""

from __future__ import annotations

import argparse
import json
import sys

from ocrforge.cli import add_engine_options, engine_config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="build FP16/INT8 model artifacts (cached, accuracy-guarded)")
    p.add_argument("--role", default="det,rec",
                   help="networks of the model set: det,rec,cls or all (default det,rec)")
    p.add_argument("--method", default="minmax", choices=["minmax", "entropy", "percentile"],
                   help="INT8 calibration method (default minmax)")
    p.add_argument("--calibration", help="folder of calibration images or a labeled set "
                   "(default: synthetic pages from `ocrforge synth`)")
    p.add_argument("--calib-pages", type=int, default=16, help="calibration pages (default 16)")
    p.add_argument("--keep-float", action="append", metavar="GROUP",
                   help="node group to keep in float (repeatable; see --list-groups)")
    p.add_argument("--list-groups", action="store_true", help="print the node groups of each network and exit")
    p.add_argument("--sweep", action="store_true",
                   help="measure per-group sensitivity on labeled pages and keep the harmful groups float")
    p.add_argument("--eval", help="labeled set for the accuracy guard (default: synthetic pages)")
    p.add_argument("--eval-pages", type=int, default=30, help="guard pages (default 30)")
    p.add_argument("--budget", type=float, default=0.5,
                   help="largest accepted CER increase in percentage points (default 0.5)")
    p.add_argument("--force", action="store_true", help="keep a build that is over the budget")
    p.add_argument("--rebuild", action="store_true", help="build again even if a cached artifact exists")
    p.add_argument("--json", action="store_true", help="print the build reports as JSON")
    g = p.add_argument_group("any ONNX model")
    g.add_argument("--model", help="convert/quantize this ONNX file instead of the model set")
    g.add_argument("--input-shape", help="input shape for calibration/compare, e.g. 1,3,224,224")
    g.add_argument("--calib-samples", type=int, default=16, help="random calibration inputs (default 16)")
    g.add_argument("-o", "--output", help="where to write the converted model (with --model)")
    g.add_argument("--compare", action="store_true",
                   help="compare FP32 vs FP16 vs INT8 outputs and speed (with --model)")
    g.add_argument("--min-cosine", type=float, default=0.99,
                   help="generic guard: refuse an artifact whose output cosine is lower (default 0.99)")
    add_engine_options(p)
    p.set_defaults(func=run)


def _roles(spec: str) -> list[str]:
    roles = ["det", "rec", "cls"] if spec == "all" else [r.strip() for r in spec.split(",") if r.strip()]
    bad = [r for r in roles if r not in ("det", "rec", "cls")]
    if bad:
        raise ValueError(f"--role must name det, rec, cls or all, not {', '.join(bad)}")
    return roles


def _require_extras(args: argparse.Namespace) -> None:
    """Everything the build will import, checked before any work: onnx (+ onnxconverter-common
    for FP16) from 'quant', and fontTools from 'bench' when synthetic pages are generated
    (static INT8 without --calibration, no --eval for the accuracy guard, or --sweep)."""
    from ocrforge.extras import require

    mods = ["onnx"] + (["onnxconverter_common"] if args.build_precision == "fp16" else [])
    needs_calib = args.build_precision == "int8" and not args.calibration
    synthetic = not args.model and not args.list_groups and (needs_calib or not args.eval or args.sweep)
    if synthetic:
        mods.append("fontTools")
    require("ocrforge build", mods)


def run(args: argparse.Namespace) -> int:
    # --precision (an engine option) names the artifact precision here
    args.build_precision = args.precision or "int8"
    if args.build_precision not in ("int8", "int8-dynamic", "fp16"):
        raise ValueError(f"--precision for build must be int8, int8-dynamic or fp16, not {args.build_precision!r}")
    _require_extras(args)
    if args.model:
        from ocrforge.optimize.compare import run_generic

        return run_generic(args)
    from ocrforge.models.registry import resolve_models
    from ocrforge.optimize.artifacts import BuildOptions, build, cache_dir
    from ocrforge.optimize.guard import BuildRefused

    args.precision = None  # the reference engine stays FP32
    cfg = engine_config_from_args(args)
    models = resolve_models(cfg.models.name, cfg.models.dir)
    roles = _roles(args.role)
    if args.list_groups:
        import tempfile
        from pathlib import Path

        from ocrforge.optimize.int8 import node_groups, preprocess

        with tempfile.TemporaryDirectory() as tmp:
            for role in roles:
                pre = preprocess(getattr(models, role), Path(tmp) / f"{role}.onnx")
                print(f"{role}:")
                for name, nodes in node_groups(pre):
                    print(f"  {name!r}: {len(nodes)} nodes")
        return 0
    opts = BuildOptions(precision=args.build_precision, method=args.method,
                        calibration=args.calibration, calib_pages=args.calib_pages,
                        keep_float=args.keep_float, sweep=args.sweep, eval=args.eval,
                        eval_pages=args.eval_pages, budget_points=args.budget, force=args.force)
    reports = []
    refused = 0
    for role in roles:
        try:
            res = build(role, getattr(models, role), opts, cfg, rebuild=args.rebuild)
        except BuildRefused as e:
            print(f"ocrforge: {e}", file=sys.stderr)
            reports.append(e.report)
            refused += 1
            continue
        rep = res.report
        reports.append(rep)
        g, sp = rep["guard"], rep["speed"]
        print(f"{role:3s} {rep['precision']:12s} {'reused' if res.reused else 'built '} "
              f"CER delta {g['delta_points']:+.2f} pts  network x{sp['speedup']}  {res.path}")
    if args.json:
        print(json.dumps(reports, indent=2, ensure_ascii=False))
    print(f"cache: {cache_dir()}", file=sys.stderr)
    return 1 if refused else 0
