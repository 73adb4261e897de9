"""Keep the cyclic garbage collector's full passes off the GPU engine's objects while it runs.

A full collection walks every tracked object of the process with the interpreter lock held.
With torch and an engine loaded that walk stopped every thread of a GPU run for up to ~200 ms
at a time (the GIL probe's longest wait), and the driver thread, which launches all device
work, paid for collections that other threads' allocations had triggered. ``gc.freeze()``
moves the objects alive at that moment (modules, networks, the engine) to a generation the
collector never walks: the longest wait fell to 34 ms and the rate rose (H100, 2026-12-07,
docs/BENCHMARKS.md).

The freeze is held while any GPU scheduler that asked for it is open and undone when the last
one closes, so a closed engine's objects are collectable again. Objects frozen are still freed
by reference counting; only cyclic garbage among them waits for the unfreeze. A collection runs
just before the freeze (once, when the first run starts): without it the garbage of an engine
closed earlier in the process, CUDA graphs included, was frozen with the rest (the bench's
second and third engines reserved 14.6 and 18.3 GiB against 9.3).

The first holder may also set the interpreter's switch interval (``sys.setswitchinterval``,
gpu.switch_interval_ms): how long another thread may keep the interpreter lock while the
driver waits for it. It is restored when the last holder releases.
"""

from __future__ import annotations

import gc
import sys
import threading

_lock = threading.Lock()
_holders: set[int] = set()
_frozen: list[bool] = []  # [True] while a holder's freeze is in place
_switch_before: list[float] = []  # the interval to restore, while a holder changed it


def hold(owner: object, freeze: bool = True, switch_s: float | None = None) -> bool:
    """Freeze the heap for ``owner`` (frozen once, however many owners) and, if given and no
    holder set one yet, the switch interval; whether this was the first holder."""
    with _lock:
        if id(owner) in _holders:
            return False
        first = not _holders
        if freeze and not _frozen:  # garbage is collected first: a closed engine's graphs
            gc.collect()            # must not be frozen
            gc.freeze()
            _frozen.append(True)
        if switch_s is not None and not _switch_before:
            _switch_before.append(sys.getswitchinterval())
            sys.setswitchinterval(switch_s)
        _holders.add(id(owner))
        return first


def release(owner: object) -> None:
    """``owner`` no longer needs the freeze; the last owner's release unfreezes (and restores
    the switch interval)."""
    with _lock:
        if id(owner) not in _holders:
            return
        _holders.discard(id(owner))
        if _holders:
            return
        if _frozen:  # the closed engine's cycles (CUDA graphs among them) go now, not at
            _frozen.clear()  # some later full collection
            gc.unfreeze()
            gc.collect()
        if _switch_before:
            sys.setswitchinterval(_switch_before.pop())


def held() -> int:
    """How many owners hold the freeze."""
    with _lock:
        return len(_holders)
