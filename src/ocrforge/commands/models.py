"""`ocrforge models`: list model sets, where each file was found, size and hash status."""

from __future__ import annotations

import argparse
import json
import sys

COLUMNS = ("model set", "role", "file", "size", "status", "found at")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list model sets and check their files")
    p.add_argument("--model-dir", help="extra folder to look in first")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _cells(r: dict) -> list[str]:
    name = r["model_set"] + (" (default)" if r["default"] else "")
    size = f"{r['size'] / 1e6:.2f} MB" if r["size"] else "-"
    status = r["status"] + (" (optional)" if r["optional"] and r["status"] == "missing" else "")
    return [name, r["role"], r["file"], size, status, r["path"] or "-"]


def run(args: argparse.Namespace) -> int:
    from ocrforge.models.registry import describe_model_sets

    rows = describe_model_sets(args.model_dir)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not sys.stdout.isatty():
        # piped or redirected: whole values, tab separated, never wrapped or cut
        print("\t".join(COLUMNS))
        for r in rows:
            print("\t".join(_cells(r)))
    else:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        t = Table(title="ocrforge model sets")
        for col in COLUMNS:
            t.add_column(col, overflow="fold")
        for r in rows:
            c = [escape(x) for x in _cells(r)]
            style = "green" if r["status"] == "ok" else "red"
            c[4] = f"[{style}]{c[4]}[/]"
            t.add_row(*c)
        Console().print(t)
    return 0 if all(r["status"] == "ok" or (r["optional"] and r["status"] == "missing")
                    for r in rows) else 1
