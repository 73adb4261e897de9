"""`ocrforge batch`: resumable OCR of many files into a folder, locally or on a Ray cluster."""

from __future__ import annotations

import argparse
import json
import sys

from ocrforge.cli import add_engine_options, engine_config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "batch", help="resumable OCR of many files into a folder (one JSON + text per page)",
        description="OCR images, folders and PDFs into OUTDIR: one <input>[.pN].json and .txt "
        "per page (N zero-padded to the page count's digits, only on multi-page inputs), "
        "mirroring the input tree, plus OUTDIR/manifest.jsonl. Run it again after an interruption "
        "and it skips the pages that are done (same input bytes, same config).")
    p.add_argument("inputs", nargs="+", metavar="SRC", help="image files, folders, PDFs")
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="output folder")
    p.add_argument("--dpi", type=int, help="PDF render resolution (default 200)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--summary-json", metavar="FILE", help="also write the job summary as JSON")
    g = p.add_argument_group("Ray (pip install 'ocrforge[ray]')")
    g.add_argument("--ray", action="store_true", help="run on a Ray cluster (Ray Data)")
    g.add_argument("--address", help="Ray cluster: 'auto' (a cluster started with `ray start`) "
                   "or ray://HOST:10001; default: start a local Ray instance")
    g.add_argument("--actors", type=int, default=1, help="OCR actors (one engine each)")
    g.add_argument("--cpus-per-actor", type=float, default=1.0,
                   help="CPUs reserved per actor; also its ONNX Runtime threads (default 1)")
    g.add_argument("--gpus-per-actor", type=float, default=0.0,
                   help="GPUs per actor (fractions allowed); use with --device cuda")
    g.add_argument("--batch-size", type=int, default=4, help="pages per actor call (default 4)")
    add_engine_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ocrforge.jobs import format_summary

    cfg = engine_config_from_args(args)
    if args.dpi:
        cfg = cfg.with_(pdf_dpi=args.dpi)
    err = Console(stderr=True)
    if args.ray:
        try:
            from ocrforge.ray import read_dataset
        except ImportError as e:
            print(f"ocrforge: error: --ray needs Ray: pip install 'ocrforge[ray]' ({e})",
                  file=sys.stderr)
            return 2
        summary = read_dataset(args.inputs, args.output, num_actors=args.actors,
                               num_cpus_per_actor=args.cpus_per_actor,
                               num_gpus_per_actor=args.gpus_per_actor,
                               batch_size=args.batch_size, config=cfg, address=args.address,
                               progress=not args.no_progress)
    else:
        from ocrforge.jobs import run_job

        summary = run_job(args.inputs, args.output, config=cfg, progress=not args.no_progress,
                          console=err)
    err.print(format_summary(summary), highlight=False, markup=False, soft_wrap=True)
    if args.summary_json:
        from ocrforge.config import atomic_write_text

        atomic_write_text(args.summary_json, json.dumps(summary.to_dict(), indent=2) + "\n")
    return 0 if summary.ok else 1
