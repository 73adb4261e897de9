"""What recognition's classifier head loses in FP16, measured on real lines (no GPU needed).

The GPU engine keeps the head (linear 120 -> ~18.7k classes, then softmax) in FP32: on the
H200 that is an FP32 (FFMA) GEMM plus an FP32 softmax over every step, ~1/5 of a rec batch's
device time (docs/BENCHMARKS.md, "ops" profile). This reads the dev set with the FP32 torch
network on the CPU, keeps every head input, rounds it to FP16 as the GPU's FP16 activations are,
and compares per step and per line:

  fp32      the GPU's current head: FP32 weights, FP32 logits, FP32 softmax (the reference)
  w16       FP16 weights and input, FP32 accumulation and logits (cuBLAS fp16 GEMM, fp32 out)
  w16o16    as w16, logits rounded to FP16 (an FP16 GEMM's output), softmax in FP32
  all16     as w16o16, softmax output rounded to FP16 (the whole head in FP16)

Usage: python benchmarks/rec_head_precision.py --dev /work/shared/data/ocr-dev [--out F.json]
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from ocrforge import OCR
from ocrforge.evaluation.dataset import load_dataset


def ctc_text(idx: torch.Tensor, chars: list[str]) -> str:
    prev, out = -1, []
    for k in idx.tolist():
        if k != prev and k != 0:
            out.append(chars[k] if k < len(chars) else "")
        prev = k
    return "".join(out)


def heads(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-step probabilities of each variant for head input x (N, T, 120) in FP32."""
    x16 = x.half().float()
    w16, b16 = w.half().float(), b.half().float()
    ref = torch.softmax(x16 @ w.T + b, dim=2)
    l16 = x16 @ w16.T + b16
    return {"fp32": ref, "w16": torch.softmax(l16, dim=2),
            "w16o16": torch.softmax(l16.half().float(), dim=2),
            "all16": torch.softmax(l16.half().float(), dim=2).half().float()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dev", required=True)
    ap.add_argument("--out")
    args = ap.parse_args()
    eng = OCR(runtime="torch")
    net = eng.runner.rec_rt.net
    seen: list[torch.Tensor] = []
    net.head.register_forward_hook(lambda _m, inp, _o: seen.append(inp[0].detach().float().clone()))
    chars = eng.models.characters()
    recs = load_dataset(args.dev)
    t0 = time.perf_counter()
    for r in recs:
        eng.read(str(r.image))
    print(f"read {len(recs)} pages in {time.perf_counter() - t0:.0f} s; {len(seen)} rec batches")
    w, b = net.head.weight.detach().float(), net.head.bias.detach().float()
    tot = {"lines": 0, "steps": 0}
    diff = {k: {"argmax_flips": 0, "lines_differ": 0, "max_conf_abs": 0.0, "line_score_abs": 0.0}
            for k in ("w16", "w16o16", "all16")}
    examples: list[dict] = []
    for x in seen:
        p = heads(x, w, b)
        cref, iref = p["fp32"].max(dim=2)
        tot["lines"] += x.shape[0]
        tot["steps"] += x.shape[0] * x.shape[1]
        ref_text = [ctc_text(iref[i], chars) for i in range(x.shape[0])]
        for k, d in diff.items():
            c, i = p[k].max(dim=2)
            d["argmax_flips"] += int((i != iref).sum())
            d["max_conf_abs"] = max(d["max_conf_abs"], float((c - cref).abs().max()))
            d["line_score_abs"] = max(d["line_score_abs"],
                                      float((c.mean(1) - cref.mean(1)).abs().max()))
            for n in (i != iref).any(dim=1).nonzero().flatten().tolist():
                t = ctc_text(i[n], chars)
                if t != ref_text[n]:
                    d["lines_differ"] += 1
                    if len(examples) < 20:
                        examples.append({"variant": k, "fp32": ref_text[n], "variant_text": t})
    res = {"totals": tot, "variants": diff, "examples": examples}
    print(json.dumps(res, ensure_ascii=False, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
