"""What a new input shape costs OpenVINO: three calls of each recognition and detection shape,
the first against the repeats (quiet machine only).

    python benchmarks/ov_first_shape.py
"""

from __future__ import annotations

import time

import numpy as np

from ocrforge import OCR

REC = [(16, 3, 48, 320), (16, 3, 48, 352), (16, 3, 48, 384), (7, 3, 48, 384), (5, 3, 48, 416),
       (16, 3, 48, 640), (3, 3, 48, 1280), (1, 3, 48, 2400)]
DET = [(1, 3, 1312, 928), (1, 3, 1344, 928), (1, 3, 1024, 1024), (1, 3, 1600, 1216)]


def calls_ms(rt, shape: tuple[int, ...], n: int = 3) -> list[float]:
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        rt.run(x)
        out.append(1000 * (time.perf_counter() - t0))
    return out


def main() -> None:
    runner = OCR().runner
    print(type(runner.rec_rt).__name__, flush=True)
    calls_ms(runner.rec_rt, REC[0])
    for name, rt, shapes in (("rec", runner.rec_rt, REC), ("det", runner.det_rt, DET)):
        for shape in shapes:
            ms = calls_ms(rt, shape)
            print(name, shape, " ".join(f"{m:.1f}" for m in ms),
                  f"first-extra {ms[0] - min(ms[1:]):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
