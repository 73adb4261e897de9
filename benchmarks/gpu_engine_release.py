"""Does a closed CUDA engine give its memory back? Runs a few dev pages through one default
engine's GPU scheduler, closes and drops it, then prints what the caching allocator still
holds and, if the scheduler object survived, the chain of objects that keep it alive; then the
CUDA tensors still alive (with who holds them) and the allocator's blocks still allocated, with
the Python stack that allocated each (torch.cuda.memory._record_memory_history).

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
                if (id(r) in seen or isinstance(r, types.FrameType) or r is level
                        or (isinstance(r, list) and len(r) > 100)):  # the probe's own lists
                    continue
                seen.add(id(r))
                print("  " * d + f"<- {type(r).__module__}.{type(r).__qualname__}: {str(r)[:160]!r}")
                nxt.append(r)
        level = nxt[:8]


def main() -> None:
    images = sorted(str(p) for p in Path(sys.argv[1]).iterdir())[: int(sys.argv[2]) if len(sys.argv) > 2 else 16]
    base = torch.cuda.memory_reserved() / 2**20
    torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
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
    live_tensors()
    allocated_blocks()


def live_tensors(top: int = 8) -> None:
    """The CUDA tensors Python still reaches, largest first, and who holds each."""
    ts = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.is_cuda]
    ts.sort(key=lambda t: -t.untyped_storage().nbytes())
    total = sum(t.untyped_storage().nbytes() for t in ts) / 2**20
    print(f"live CUDA tensors: {len(ts)}, {total:.1f} MiB (storages, shared ones counted again)")
    for t in ts[:top]:
        print(f"  {tuple(t.shape)} {t.dtype} {t.untyped_storage().nbytes() / 2**20:.2f} MiB")
        referrer_chain(t, depth=2)


def allocated_blocks(top: int = 12) -> None:
    """Blocks still allocated, by pool, with the ocrforge frames that allocated them."""
    snap = torch.cuda.memory._snapshot()
    rows = []
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] != "active_allocated":
                continue
            frames = [f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in b.get("frames", [])
                      if "ocrforge" in f["filename"]][:4]
            rows.append((b["size"], seg.get("segment_pool_id"), seg["stream"], frames))
    rows.sort(key=lambda r: -r[0])
    print(f"allocated blocks: {len(rows)}, {sum(r[0] for r in rows) / 2**20:.1f} MiB")
    for size, pool, stream, frames in rows[:top]:
        print(f"  {size / 2**20:.2f} MiB pool {pool} stream {stream:#x}: {' <- '.join(frames) or '?'}")


if __name__ == "__main__":
    main()
