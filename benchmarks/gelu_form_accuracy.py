"""Dev-set accuracy of the FP32 torch engine on the CPU with the networks' GELU in its erf form
(as trained) or its tanh form (what cuBLASLt's GELU epilogue computes on the GPU; see
runtimes/torch_pointwise.py). Usage: python benchmarks/gelu_form_accuracy.py erf|tanh [DEVSET]"""

from __future__ import annotations

import json
import sys

import torch

from ocrforge import OCR
from ocrforge.evaluation.eval import evaluate
from ocrforge.models import torch_layers


def main() -> None:
    form = sys.argv[1]
    dev = sys.argv[2] if len(sys.argv) > 2 else "/work/shared/data/ocr-dev"
    torch.set_num_threads(2)
    if form == "tanh":
        init = torch_layers.MixerBlock.__init__

        def tanh_init(self, *a, **k) -> None:
            init(self, *a, **k)
            self.act = torch.nn.GELU(approximate="tanh")

        torch_layers.MixerBlock.__init__ = tanh_init
    o = evaluate(OCR(runtime="torch", device="cpu"), dev)["overall"]
    print(form, json.dumps({k: o.get(k) for k in ("cer", "cer_aligned", "det_f1", "pages")}))


if __name__ == "__main__":
    main()
