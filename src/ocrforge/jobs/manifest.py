"""The job manifest: an append-only JSONL file, one record per finished page or input.

Why JSONL and not sqlite: records are only ever appended, one writer holds the job lock, and
a reader needs nothing but ``jq``/``grep``. A SIGKILL can only tear the last line; it is cut
off when the manifest is opened again, so the next append starts on a clean line. Every
append is flushed and fsynced, and a page's record is appended only after its output files
are in place, so a record never points at a missing or half-written file.

Records (``status``):

- ``done``: one page; ``name`` (output stem, relative to the output folder), ``source``,
  ``page``, ``sha256`` (of the input's bytes), ``config`` (config hash), ``outputs``.
- ``error``: an input (or one of its pages) failed; ``source``, ``page`` (None when the whole
  input failed), ``sha256``, ``config``, ``error``. Errors are retried on the next run.
- ``complete``: every page of an input is done; ``input`` (relative name), ``sha256``,
  ``config``, ``pages``. Lets a re-run skip a PDF without rendering its pages.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from ocrforge.paths import OutputError

MANIFEST_NAME = "manifest.jsonl"


class Manifest:
    """Read the existing records, then append new ones durably."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.pages: dict[str, dict[str, Any]] = {}  # output stem -> latest "done" record
        self.inputs: dict[str, dict[str, Any]] = {}  # relative input -> latest "complete"
        self.bad_lines = 0
        self._load()
        new = not self.path.exists()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if new:
            _fsync_dir(self.path.parent)

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        if end < len(data):  # a write torn by a kill: drop the partial last line
            with open(self.path, "r+b") as f:
                f.truncate(end)
                os.fsync(f.fileno())
        for raw in data[:end].splitlines():
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                self.bad_lines += 1
                continue
            self._index(rec)

    def _index(self, rec: dict[str, Any]) -> None:
        status = rec.get("status")
        if status == "done":
            self.pages[rec["name"]] = rec
        elif status == "complete":
            self.inputs[rec["input"]] = rec

    def append(self, rec: dict[str, Any]) -> None:
        line = json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n"
        try:  # a short write (disk full) leaves a torn last line: cut off on the next open
            data = line.encode("utf-8")
            if os.write(self._fd, data) != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(self._fd)
        except OSError as e:
            raise OutputError(self.path, e) from None
        self._index(rec)

    def page_done(self, name: str, sha256: str, config: str) -> bool:
        rec = self.pages.get(name)
        return rec is not None and rec["sha256"] == sha256 and rec["config"] == config

    def input_complete(self, rel: str, sha256: str, config: str) -> int | None:
        """Page count of a finished input, or None when it is not finished."""
        rec = self.inputs.get(rel)
        if rec is None or rec["sha256"] != sha256 or rec["config"] != config:
            return None
        return int(rec["pages"])

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a directory
        pass
    finally:
        os.close(fd)
