"""`ocrforge bench`: a matrix of engine configurations (and peers) measured in one run."""

from __future__ import annotations

import argparse
import sys

from ocrforge.cli import add_engine_options, engine_config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    # "resolve": bench's repeatable --profile NAME=path replaces the engine option --profile PATH
    p = sub.add_parser("bench", help="speed, memory and accuracy of configurations (and peers), one run",
                       conflict_handler="resolve")
    p.add_argument("dataset", help="labeled set (folder with labels.jsonl) or images / a folder of images")
    p.add_argument("--config", action="append", default=[], metavar="NAME=key=val,...",
                   help="a named configuration: EngineConfig fields over the engine options "
                        "(e.g. int8=rec_precision=int8,det_precision=int8); repeatable")
    p.add_argument("--baseline", help="configuration the ratios are against (default: the first)")
    p.add_argument("--compare", default="", help="peers measured in the same run: onnxocr,rapidocr")
    p.add_argument("--repeat", type=int, default=3, help="measured repetitions (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up passes (not measured)")
    p.add_argument("--warmup-pages", type=int, default=4, help="pages per warm-up pass")
    p.add_argument("--limit", type=int, help="only the first N pages")
    p.add_argument("--latency-limit", type=int, help="single-page latency over the first N pages only")
    p.add_argument("--batch-pages", type=int, default=None, help="read_many batch_pages (default: the "
                   "engine's own, as a user gets it) and batch size of the batch-latency pass (default 4)")
    p.add_argument("--no-batch-latency", action="store_true", help="skip the batch-latency pass")
    p.add_argument("--casefold", choices=["auto", "always", "never"], default="auto")
    p.add_argument("--out", default="bench-out", help="folder for bench.json, bench.md, bench.png")
    add_engine_options(p)
    p.add_argument("--profile", dest="profiles", action="append", default=[], metavar="NAME=path.json",
                   help="a named configuration from a saved profile (repeatable); a bare PATH is the "
                        "base configuration that --config entries change")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.console import Console
    from rich.markdown import Markdown
    from rich.markup import escape

    from ocrforge.extras import install_hint, installed
    from ocrforge.tools.bench import (
        BenchSettings,
        Entry,
        load_inputs,
        parse_config_spec,
        parse_profile_spec,
        run_bench,
        write_outputs,
    )
    from ocrforge.tools.peers import PEERS, check_peer

    err = Console(stderr=True)
    peers = [s.strip() for s in args.compare.split(",") if s.strip()]
    for peer in peers:  # before any work: a missing peer says how to install it
        if peer not in PEERS:
            print(f"ocrforge: error: unknown peer {peer!r} (known: {', '.join(PEERS)})", file=sys.stderr)
            return 2
        check_peer(peer)
    if not installed("matplotlib"):
        err.print(escape(f"note: no chart (bench.png): matplotlib is not installed; "
                         f"{install_hint(['matplotlib'])} adds it. The table is still printed."),
                  highlight=False, soft_wrap=True)
    named = [s for s in args.profiles if "=" in s and not Path(s).exists()]
    bare = [s for s in args.profiles if s not in named]
    if len(bare) > 1:
        print("ocrforge: error: give at most one base --profile PATH (others as NAME=path)", file=sys.stderr)
        return 2
    args.profile = bare[0] if bare else None
    base = engine_config_from_args(args)
    entries = [parse_config_spec(s, base) for s in args.config]
    entries += [parse_profile_spec(s) for s in named]
    if not entries:
        entries = [Entry("default", "ocrforge", base.to_dict(), source="engine options")]
    for peer in peers:
        entries.append(Entry(peer, "peer", peer=peer, source="--compare"))
    inp = load_inputs(args.dataset, args.limit)
    st = BenchSettings(repeat=args.repeat, warmup=args.warmup, warmup_pages=args.warmup_pages,
                       batch_pages=args.batch_pages, batch_latency=not args.no_batch_latency,
                       latency_limit=args.latency_limit, casefold=args.casefold,
                       extra={"argv": sys.argv[1:]})
    report = run_bench(inp, entries, args.baseline, st, log=lambda s: err.print(escape(s), highlight=False))
    paths = write_outputs(report, args.out)
    con = Console(width=max(Console().width, 140))
    con.print(Markdown(paths["md"].read_text(encoding="utf-8")))
    for n in report["order"]:
        d = report["entries"][n].get("describe") or {}
        thr = [(t["model"], t["intra_op_num_threads"]) for t in d.get("threads", [])]
        con.print(escape(f"{n}: compute threads per network {thr}"),
                  highlight=False)
    err.print(escape("wrote " + ", ".join(str(p) for p in paths.values())), highlight=False)
    return 1 if any(report["entries"][n]["error"] for n in report["order"]) else 0
