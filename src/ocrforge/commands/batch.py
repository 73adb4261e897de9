"""`ocrforge batch`: resumable OCR of many files into a folder, locally or on a Ray cluster."""

from __future__ import annotations

import argparse
import json
import sys

from ocrforge.cli import (
    add_engine_options,
    devices_from_args,
    engine_config_from_args,
    engine_from_args,
)


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
    g.add_argument("--address", help="join a Ray cluster: 'auto' (the one started with `ray start` on "
                   "this machine), HOST:6379 (its head) or ray://HOST:10001 (Ray Client); "
                   "default: start a private local Ray instance, even if RAY_ADDRESS is set")
    g.add_argument("--actors", type=int, help="OCR actors, one engine each (default 1; with "
                   "--gpus N or --device cuda:0,...: one per GPU)")
    g.add_argument("--cpus-per-actor", type=float, default=1.0,
                   help="CPUs reserved per actor; also its ONNX Runtime threads (default 1)")
    g.add_argument("--gpus-per-actor", type=float,
                   help="GPUs per actor (fractions allowed; default 1 with --device cuda, else 0)")
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
        cfg, actors, gpus = _ray_placement(args, cfg)
        summary = read_dataset(args.inputs, args.output, num_actors=actors,
                               num_cpus_per_actor=args.cpus_per_actor,
                               num_gpus_per_actor=gpus,
                               batch_size=args.batch_size, config=cfg, address=args.address,
                               progress=not args.no_progress, quiet=True)
    else:
        from ocrforge.jobs import run_job

        summary = run_job(args.inputs, args.output, engine=engine_from_args(args, cfg),
                          progress=not args.no_progress, console=err)
    err.print(format_summary(summary), highlight=False, markup=False, soft_wrap=True)
    if args.summary_json:
        from ocrforge.config import atomic_write_text

        atomic_write_text(args.summary_json, json.dumps(summary.to_dict(), indent=2) + "\n")
    return 0 if summary.ok else 1


def _ray_placement(args: argparse.Namespace, cfg):
    """(config, actors, GPUs per actor) for --ray: a CUDA engine gets one GPU per actor by
    default, and --gpus N / --device cuda:0,cuda:1 mean one actor per GPU. Ray sets each
    actor's CUDA_VISIBLE_DEVICES, so the actor's engine runs on "cuda" (its own GPU)."""
    devices = devices_from_args(args)
    actors, gpus = args.actors, args.gpus_per_actor
    if cfg.runtime.device.startswith("cuda"):
        cfg = cfg.with_(device="cuda")
        gpus = 1.0 if gpus is None else gpus
        if actors is None and len(devices) > 1:
            actors = len(devices)
    return cfg, actors or 1, gpus or 0.0
