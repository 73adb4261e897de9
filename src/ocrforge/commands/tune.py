"""`ocrforge tune`: sweep precision, sizes, batches and threads; write the fastest accurate profile.

    ocrforge tune -o fast.json                    # synthetic sample pages, budget +0.3 CER points
    ocrforge tune my_labeled_set/ --budget 0.2 -o fast.json
    ocrforge read --profile fast.json scans/
"""

from __future__ import annotations

import argparse

from ocrforge.cli import add_engine_options, engine_config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    from ocrforge.tools.tune import AXES

    p = sub.add_parser("tune", help="find the fastest configuration within an accuracy budget; write a profile")
    p.add_argument("dataset", nargs="?", help="labeled set (folder with labels.jsonl); default: synthetic pages")
    p.add_argument("-o", "--output", default="ocrforge-profile.json", help="profile to write")
    p.add_argument("--pages", type=int, default=30, help="synthetic pages / first N pages of the set (default 30)")
    p.add_argument("--budget", type=float, default=0.3,
                   help="largest accepted CER increase over FP32, percentage points (default 0.3)")
    p.add_argument("--axes", default=",".join(AXES),
                   help=f"axes to search, in order (default {','.join(AXES)})")
    p.add_argument("--repeat", type=int, default=1, help="timed runs per candidate (median; default 1)")
    add_engine_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ocrforge.optimize.artifacts import synth_dir
    from ocrforge.tools.tune import AXES, describe, main_log, tune, write_profile

    axes = [a.strip() for a in args.axes.split(",") if a.strip()]
    bad = [a for a in axes if a not in AXES]
    if bad:
        raise ValueError(f"unknown axes {bad}; known: {', '.join(AXES)}")
    from ocrforge.extras import require

    # before any work: INT8 candidates are built (onnx), synthetic pages need fontTools
    if not args.dataset:
        require("ocrforge tune without a dataset (synthetic pages)", ["fontTools"])
    if "precision" in axes:
        require("ocrforge tune's precision axis (or leave it out with --axes)", ["onnx"])
    dataset = args.dataset or str(synth_dir(3001, args.pages))
    limit = args.pages if args.dataset else None
    start = engine_config_from_args(args)
    main_log(f"tuning on {dataset} ({args.pages} pages), budget +{args.budget} CER points")
    res = tune(dataset, start, budget_points=args.budget, axes=axes, limit=limit,
               repeat=args.repeat, log=main_log)
    path = write_profile(res, args.output, dataset, args.budget)
    print(describe(res))
    main_log(f"profile written to {path}; use it with --profile {path}")
    return 0
