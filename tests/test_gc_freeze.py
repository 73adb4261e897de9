"""The GPU engine's heap freeze (scheduling/gc_freeze.py, gpu.gc_freeze): held once however many
schedulers ask, undone when the last one lets go, so their objects are collectable again."""

import gc
import weakref

from ocrforge.scheduling import gc_freeze


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_frozen_cyclic_garbage_is_collected_once_the_last_holder_lets_go(monkeypatch):
    # on its own: engines of other tests may hold the freeze in this process
    monkeypatch.setattr(gc_freeze, "_holders", set())
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
    monkeypatch.setattr(gc_freeze, "_holders", set())
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
    monkeypatch.setattr(gc_freeze, "_holders", set())
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
