"""Page orientation on the device vs on the host: do the decisions agree?

The GPU scheduler classifies pages with the native torch network and ``prepare_torch`` (the
same steps written with torch ops, three crops of every page); the CPU engine with ONNX Runtime
and ``prepare`` (pyrDown steps, then INTER_AREA; the two end crops only when the centre is
unsure). This runs both on the same pages -- every image of a labeled set turned
by 0/90/180/270 -- and counts agreeing decisions and right angles (CPU torch is enough: the
question is the preprocessing and the network, not the device).

    python benchmarks/orientation_parity.py /path/to/ocr-dev [--out parity.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np
import torch

from ocrforge.config import EngineConfig
from ocrforge.models.native import build_native
from ocrforge.models.registry import resolve_models, resolve_optional
from ocrforge.runtimes.factory import open_onnx
from ocrforge.stages import page_orientation as po

TURN = {0: None, 90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dataset")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    models = resolve_models("ppocrv6-small")
    path = resolve_optional(models.model_set.page_orientation)
    ort = open_onnx(path, EngineConfig().runtime)
    net = build_native(models.model_set, "page_orientation", path)
    images = sorted(p for p in (Path(a.dataset) / "images").iterdir())
    res = {"pages": 0, "agree": 0, "host_right": 0, "device_right": 0, "max_prob_diff": 0.0,
           "disagreements": []}
    for f in images:
        img0 = cv2.imread(str(f))
        for angle, code in TURN.items():
            img = img0 if code is None else cv2.rotate(img0, code)
            if not po.applies(*img.shape[:2]):
                continue
            # the host runs the end crops only for an unsure centre (PageRunner.upright_pages),
            # the device always runs all three (GpuScheduler.run_orient)
            # (and the centre crop turned 180 only for a page decided 180; the device always)
            xh = po.prepare([img])
            p_host = ort.run(xh)
            ends = ort.run(po.prepare([img], po.ENDS)) if po.unsure(p_host, po.THRESH) else None
            a_host = po.decide(p_host, po.THRESH, ends)
            back = ort.run(po.turned_180(xh)) if po.pages_to_confirm(a_host) else None
            if back is not None:
                ends = ort.run(po.prepare([img], po.ENDS))
                a_host = po.confirm(a_host, back, po.THRESH, ends)
            a_host = a_host[0]
            with torch.inference_mode():
                x = po.prepare_torch(torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1),
                                     po.CENTRE + po.ENDS)
                x = torch.cat([x, x[:1].flip((-2, -1))])
                p_dev = net(x).numpy()
            a_dev = po.confirm(po.decide(p_dev[:1], po.THRESH, p_dev[1:3]), p_dev[3:], po.THRESH, p_dev[1:3])[0]
            keep = [0] + ([1, 2] if ends is not None else []) + ([3] if back is not None else [])
            p_host = np.concatenate([p_host] + ([ends] if ends is not None else [])
                                    + ([back] if back is not None else []))
            p_dev = p_dev[keep]
            res["pages"] += 1
            res["agree"] += a_host == a_dev
            res["host_right"] += a_host == angle
            res["device_right"] += a_dev == angle
            res["max_prob_diff"] = max(res["max_prob_diff"], float(np.abs(p_host - p_dev).max()))
            if a_host != a_dev:
                res["disagreements"].append({"image": f.name, "angle": angle, "host": a_host,
                                             "device": a_dev})
    print(json.dumps(res, indent=1))
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
