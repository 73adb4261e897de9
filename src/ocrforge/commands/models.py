"""`ocrforge models`: list model sets, where each file was found, size and hash status."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list model sets and check their files")
    p.add_argument("--model-dir", help="extra folder to look in first")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ocrforge.models.registry import describe_model_sets

    rows = describe_model_sets(args.model_dir)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        t = Table(title="ocrforge model sets")
        for col in ("model set", "role", "file", "size", "status", "found at"):
            t.add_column(col)
        for r in rows:
            name = r["model_set"] + (" (default)" if r["default"] else "")
            size = f"{r['size'] / 1e6:.2f} MB" if r["size"] else "-"
            style = "green" if r["status"] == "ok" else "red"
            t.add_row(name, r["role"], r["file"], size, f"[{style}]{r['status']}[/]", r["path"] or "-")
        Console().print(t)
    return 0 if all(r["status"] == "ok" for r in rows) else 1
