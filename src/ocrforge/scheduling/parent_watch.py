"""A spawned process that ends when the process that started it is gone.

Why: a child blocked on a multiprocessing queue never sees its parent die (it holds the
queue's write end itself, so no end-of-file comes), and a parent killed outright (an OOM kill,
a crash, SIGKILL) runs no clean-up. Engine children and their worker pools would otherwise
live on, holding memory and shared-memory blocks.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

POLL_S = 1.0


def exit_with_parent(parent: int, close: Callable[[], None] | None = None) -> None:
    """From now on, once this process's parent is no longer ``parent``: run ``close`` (at most
    5 s) and exit at once."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        if close is not None:
            t = threading.Thread(target=close, daemon=True)
            t.start()
            t.join(5.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="ocrforge-parent-watch").start()


__all__ = ["exit_with_parent"]
