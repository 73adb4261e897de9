"""The GPU engine's heap freeze (scheduling/gc_freeze.py, gpu.gc_freeze): held once however many
schedulers ask, undone when the last one lets go, so their objects are collectable again."""

import gc
import weakref

from ocrforge.scheduling import gc_freeze


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _alone(monkeypatch) -> None:
    """On its own: engines of other tests may hold the freeze in this process."""
    for name, empty in (("_holders", set()), ("_frozen", []), ("_switch_before", [])):
        monkeypatch.setattr(gc_freeze, name, empty)


def test_frozen_cyclic_garbage_is_collected_once_the_last_holder_lets_go(monkeypatch):
    _alone(monkeypatch)
    was_frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    a, b = object(), object()
    obj = _Cycle()
    ref = weakref.ref(obj)
    assert gc_freeze.hold(a) is True and gc.get_freeze_count() > 0
    assert gc_freeze.hold(b) is False and gc_freeze.hold(a) is False  # frozen once, held twice
    del obj
    gc.collect()
    assert ref() is not None  # frozen: the collector does not walk it
    gc_freeze.release(a)
    gc.collect()
    assert ref() is not None and gc_freeze.held() == 1  # b still holds it
    gc_freeze.release(b)
    gc_freeze.release(b)  # a second release is harmless
    gc.collect()
    assert ref() is None and gc_freeze.held() == 0 and gc.get_freeze_count() == 0
    if was_frozen:  # as the other tests' engines left it
        gc.freeze()


def test_garbage_left_before_the_freeze_is_collected_not_frozen(monkeypatch):
    """An engine closed earlier leaves cyclic garbage (its CUDA graphs among it, on a GPU):
    frozen with the rest it stayed in memory until the unfreeze (bench, H100, 2026-12-07)."""
    _alone(monkeypatch)
    was_frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    old = _Cycle()
    ref = weakref.ref(old)
    del old
    owner = object()
    gc_freeze.hold(owner)
    try:
        assert ref() is None
    finally:
        gc_freeze.release(owner)
        if was_frozen:
            gc.freeze()


def test_the_last_release_collects_what_the_freeze_kept(monkeypatch):
    """After the unfreeze a closed engine's cycles sat in the oldest generation until some
    later full collection: the next engine's bench row reserved 14.0 GiB against 9.3."""
    _alone(monkeypatch)
    was_frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    owner = object()
    gc_freeze.hold(owner)
    kept = _Cycle()
    ref = weakref.ref(kept)
    del kept
    gc.freeze()  # as if it had been alive at the freeze
    gc_freeze.release(owner)
    try:
        assert ref() is None
    finally:
        if was_frozen:
            gc.freeze()


def test_the_switch_interval_is_set_while_held_and_restored_after(monkeypatch):
    """gpu.switch_interval_ms: the first holder that asks sets it, the last release restores
    it; a holder without the freeze (gpu.gc_freeze off) freezes nothing."""
    import sys

    _alone(monkeypatch)
    before = sys.getswitchinterval()
    was_frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    a, b = object(), object()
    try:
        gc_freeze.hold(a, freeze=False, switch_s=0.001)
        assert sys.getswitchinterval() == 0.001 and gc.get_freeze_count() == 0
        gc_freeze.hold(b, switch_s=0.002)  # set already: the first holder's stays
        assert sys.getswitchinterval() == 0.001 and gc.get_freeze_count() > 0
        gc_freeze.release(a)
        assert sys.getswitchinterval() == 0.001
        gc_freeze.release(b)
        assert sys.getswitchinterval() == before and gc.get_freeze_count() == 0
    finally:
        sys.setswitchinterval(before)
        if was_frozen:
            gc.freeze()
