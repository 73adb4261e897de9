"""Where ocrforge keeps files of its own (one source of truth, imported by every layer)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_CACHE = "OCRFORGE_CACHE_DIR"


def cache_dir() -> Path:
    """Built artifacts, compiled kernels and cached synthetic sets: OCRFORGE_CACHE_DIR, else the
    user cache folder (platformdirs; ~/.cache/ocrforge on Linux)."""
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("ocrforge", appauthor=False))


# ---------------------------------------------------------------------- names shown to people
# C0/C1 controls (ESC starts ANSI/OSC sequences, a newline forges a line) and the bidi
# overrides/isolates that reorder what a terminal shows
_BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: object) -> str:
    """``text`` safe to print on a terminal: control characters become escapes (``\\x1b``,
    ``\\n``, ``\\u202e``), so a file name can neither colour, retitle nor forge output lines.
    Only for what people read; JSON output keeps the real name."""
    s = str(text)
    if all(" " <= ch < "\x7f" for ch in s):  # the common case: plain ASCII
        return s
    out = []
    for ch in s:
        o = ord(ch)
        if o < 0x20 or 0x7f <= o < 0xa0 or ch in _BIDI or 0xd800 <= o < 0xe000:
            out.append(ch.encode("unicode_escape").decode("ascii") if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


class OutputError(OSError):
    """An output could not be written (disk full, read-only, permissions): printed as one line,
    ``cannot write PATH: no space left on device``, by the command line (exit 1)."""

    def __init__(self, path: str | os.PathLike[str], err: OSError):
        super().__init__(err.errno, err.strerror or str(err), os.fspath(path))

    def __str__(self) -> str:
        reason = str(self.strerror or "error")
        return f"cannot write {printable(self.filename)}: {reason[:1].lower()}{reason[1:]}"
