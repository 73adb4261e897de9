"""The output folder of a batch job: per-page files, the manifest, the job lock.

Order of a page's writes, so that a SIGKILL at any moment is harmless:

1. ``<name>.json`` and ``<name>.txt`` are each written to ``.<file>.<pid>.ocrforge-tmp``,
   fsynced and renamed over the final name (a reader sees the old file or the new one);
2. the folder is fsynced (the renames survive a machine crash too);
3. the ``done`` record is appended to the manifest and fsynced.

A kill before 3 leaves outputs without a record: the page is read again and its files are
replaced by equal ones. A kill during 1 leaves a temp file, removed when the next job starts
(only names ending in ``.ocrforge-tmp`` are touched, and only under this output folder).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ocrforge.jobs.manifest import MANIFEST_NAME, Manifest, _fsync_dir
from ocrforge.paths import OutputError

TEMP_SUFFIX = ".ocrforge-tmp"
LOCK_NAME = ".ocrforge.lock"


class JobLockedError(RuntimeError):
    """Another job is writing to the same output folder."""


class PageStore:
    """Owns an output folder for the length of one job (a context manager)."""

    def __init__(self, output_dir: str | os.PathLike[str], config_hash: str):
        self.root = Path(output_dir)
        self.config = config_hash
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"output {self.root} exists and is not a folder")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock_fd = _lock(self.root / LOCK_NAME)
        except OSError as e:
            raise OutputError(self.root, e) from None
        self.removed_temp_files = remove_stale_temp_files(self.root)
        try:
            self.manifest = Manifest(self.root / MANIFEST_NAME)
        except OSError as e:
            raise OutputError(self.root / MANIFEST_NAME, e) from None

    # ------------------------------------------------------------------ queries
    def page_done(self, name: str, sha256: str) -> bool:
        """Done by an earlier run with the same input bytes and config, files still there."""
        return self.manifest.page_done(name, sha256, self.config) and all(
            p.is_file() for p in self.output_paths(name))

    def input_done(self, rel: str, sha256: str) -> int | None:
        """Page count of an input finished by an earlier run (all its files there), else None."""
        from ocrforge.jobs.naming import page_name

        n = self.manifest.input_complete(rel, sha256, self.config)
        if n is None:
            return None
        if all(self.page_done(page_name(rel, i, n), sha256) for i in range(n)):
            return n
        return None

    def output_paths(self, name: str) -> tuple[Path, Path]:
        return self.root / f"{name}.json", self.root / f"{name}.txt"

    # ------------------------------------------------------------------ writes
    def write_page(self, name: str, *, source: str, page: int, sha256: str,
                   doc: dict[str, Any], text: str) -> None:
        """Write one page's JSON and text, then record it as done."""
        json_path, txt_path = self.output_paths(name)
        try:
            json_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(json_path.parent, e) from None
        write_atomic(json_path, (json.dumps(doc, ensure_ascii=False, indent=2) + "\n").encode())
        write_atomic(txt_path, (text + "\n").encode())
        _fsync_dir(json_path.parent)
        self.manifest.append({
            "status": "done", "name": name, "source": source, "page": page, "sha256": sha256,
            "config": self.config, "outputs": [f"{name}.json", f"{name}.txt"],
        })

    def record_error(self, *, source: str, page: int | None, sha256: str | None,
                     error: str) -> None:
        self.manifest.append({"status": "error", "source": source, "page": page,
                              "sha256": sha256, "config": self.config, "error": error})

    def record_complete(self, *, rel: str, source: str, sha256: str, pages: int) -> None:
        self.manifest.append({"status": "complete", "input": rel, "source": source,
                              "sha256": sha256, "config": self.config, "pages": pages})

    def close(self) -> None:
        self.manifest.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def __enter__(self) -> PageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_atomic(path: Path, data: bytes) -> None:
    """Temp file (our own name pattern, see remove_stale_temp_files) + fsync + rename; any
    OSError is an OutputError naming ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise OutputError(path, e) from None
        raise


def remove_stale_temp_files(root: Path) -> int:
    """Delete temp files a killed job left under ``root``; returns how many."""
    n = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            if f.startswith(".") and f.endswith(TEMP_SUFFIX):
                try:
                    os.unlink(os.path.join(dirpath, f))
                    n += 1
                except FileNotFoundError:
                    pass
    return n


def _lock(path: Path) -> int | None:
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, one job per folder is then up to the user
        return None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise JobLockedError(
            f"another ocrforge batch job is writing to {path.parent}; wait for it to finish "
            "or choose another output folder") from None
    return fd
