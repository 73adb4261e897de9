"""Where each page's output goes: the input tree mirrored under the output folder.

The root is the deepest folder that holds every SRC argument (a folder argument counts as
itself, a file argument as its parent), so ``a/x.png`` and ``b/x.png`` land in ``OUT/a/`` and
``OUT/b/`` and never collide. A single-page input is ``<name>.json``; page N of a multi-page
input is ``<name>.pN.json`` with N zero-padded to the digits of the page count, page 1
included (``book.p01.json`` ... ``book.p40.json``), so names sort in page order (the
convention of ``ocrforge read -o DIR/``); the input's extension stays in the name so
``scan.png`` and ``scan.jpg`` do not collide either.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

# Config keys that decide how fast a page is read, not what is read: a re-run with other
# thread counts (or a Ray actor, which sets its own) still resumes the same outputs.
EXECUTION_KEYS = frozenset({
    "intra_op_threads", "inter_op_threads", "det_threads", "rec_threads", "allow_spinning",
    "execution_mode", "enable_mem_pattern", "enable_cpu_mem_arena", "shrink_arena", "workers",
    "queue_size", "trim_heap",
    "pipeline",
})


def input_root(sources: list[str]) -> Path:
    """The folder that output names are relative to (see the module docstring)."""
    if not sources:
        raise ValueError("no inputs given")
    roots = []
    for s in sources:
        p = Path(os.path.abspath(s))
        roots.append(str(p if p.is_dir() else p.parent))
    return Path(os.path.commonpath(roots))


def relative_name(path: str, root: Path) -> str:
    """``path`` relative to ``root``, with forward slashes (the same on every OS)."""
    rel = Path(os.path.abspath(path)).relative_to(root)
    return rel.as_posix()


def page_suffix(page_index: int, pages: int) -> str:
    """``.pN`` of one page of a ``pages``-page input: N from 1, zero-padded to the digits of
    the page count so that names sort in page order; "" for a single-page input."""
    if pages <= 1 and page_index == 0:
        return ""
    return f".p{page_index + 1:0{len(str(max(pages, page_index + 1)))}d}"


def page_name(rel: str, page_index: int, pages: int) -> str:
    """Output stem of one page of a ``pages``-page input (see the module docstring)."""
    return rel + page_suffix(page_index, pages)


def config_hash(config: Any) -> str:
    """sha256 of the config's JSON with execution-only keys removed (at any depth)."""
    data = _strip(config.to_dict())
    blob = json.dumps(data, sort_keys=True, default=str, ensure_ascii=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in EXECUTION_KEYS}
    if isinstance(obj, (list, tuple)):
        return [_strip(v) for v in obj]
    return obj
