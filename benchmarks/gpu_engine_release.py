"""Does a closed CUDA engine give its memory back? Runs a few dev pages through one default
engine's GPU scheduler, closes and drops it, then prints what the caching allocator still
holds and, if the scheduler object survived, the chain of objects that keep it alive.

    python benchmarks/gpu_engine_release.py DEV_IMAGES_DIR [N_PAGES]
"""

from __future__ import annotations

import gc
import sys
import types
import weakref
from pathlib import Path

import torch

from ocrforge import OCR


def referrer_chain(obj: object, depth: int = 4) -> None:
    """Print who refers to ``obj``, a few levels up (frames and this module's locals left out)."""
    level = [obj]
    seen = {id(obj)}
    for d in range(depth):
        nxt = []
        for o in level:
            for r in gc.get_referrers(o):
                if id(r) in seen or isinstance(r, types.FrameType) or r is level:
                    continue
                seen.add(id(r))
                print("  " * d + f"<- {type(r).__module__}.{type(r).__qualname__}: {str(r)[:160]!r}")
                nxt.append(r)
        level = nxt[:8]


def main() -> None:
    images = sorted(str(p) for p in Path(sys.argv[1]).iterdir())[: int(sys.argv[2]) if len(sys.argv) > 2 else 16]
    base = torch.cuda.memory_reserved() / 2**20
    eng = OCR(device="cuda")
    gp = eng.gpu_scheduler()
    for _ in range(2):
        list(gp.run(images))
    held = torch.cuda.memory_reserved() / 2**20
    ref = weakref.ref(gp)
    rt = weakref.ref(gp.rec)
    eng.close()
    del gp, eng
    gc.collect()
    torch.cuda.empty_cache()
    print(f"reserved MiB: before {base:.0f}, engine running {held:.0f}, after close+gc+empty_cache "
          f"{torch.cuda.memory_reserved() / 2**20:.0f}; scheduler alive {ref() is not None}, "
          f"rec runtime alive {rt() is not None}", flush=True)
    for name, w in (("scheduler", ref), ("rec runtime", rt)):
        if w() is not None:
            print(f"who keeps the {name}:")
            referrer_chain(w())


if __name__ == "__main__":
    main()
