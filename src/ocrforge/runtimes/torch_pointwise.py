"""1x1 convolutions as matrix products with the bias in the GEMM (CUDA only).

On a channels_last tensor a 1x1, stride-1, ungrouped convolution is a product of the
(N*H*W, C_in) pixel matrix with the (C_in, C_out) weight. cuDNN runs the product well, but
PyTorch adds a convolution's bias afterwards in a separate broadcasting ``add_`` that cannot use
the vectorised elementwise kernel: on the H200 (2026-12-05, benchmarks/gpu_ops.py, FP16) those
adds took 19 % of detection's device time and 28-31 % of recognition's. ``F.linear`` on 2-D
input is ``addmm``, which cuBLASLt runs with the bias in the GEMM's epilogue: no extra pass.
Blocks whose depthwise convolution's bias can move into the 1x1 convolutions after it do so
first (``fold_bias``, e.g. models/torch_layers.MixerBlock).

A GELU right after a 1x1 convolution (a module's ``fusable`` pairs) runs in the same GEMM's
epilogue (``torch._addmm_activation``, cuBLASLt's GELU_BIAS). That epilogue computes the tanh
form of GELU, not the erf form of the trained network (they differ by at most 5e-4, below FP16's
step at the activations' scale); the CPU path of a fused layer computes the same tanh form, so
CPU tests see what the GPU reads. The runtime fuses them under FP16 and BF16, not FP32 (the
reference). Accuracy with it: docs/ACCURACY.md, "The GPU's GELU form".
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class PointwiseLinear(nn.Module):
    """A 1x1 stride-1 ``nn.Conv2d`` computed as ``F.linear`` on the channels-last pixel rows."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        self.weight = nn.Parameter(conv.weight.detach().reshape(conv.out_channels, conv.in_channels).clone())
        self.bias = None if conv.bias is None else nn.Parameter(conv.bias.detach().clone())
        self.gelu = False  # GELU (tanh form) in the GEMM's epilogue: fuse_activations

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        rows = x.permute(0, 2, 3, 1).reshape(n * h * w, c)  # a view when x is channels_last
        if not self.gelu:
            y = F.linear(rows, self.weight, self.bias)
        elif rows.is_cuda:
            y = torch._addmm_activation(self.bias, rows, self.weight.t(), use_gelu=True)
        else:  # what the CUDA epilogue computes
            y = F.gelu(F.linear(rows, self.weight, self.bias), approximate="tanh")
        return y.view(n, h, w, -1).permute(0, 3, 1, 2)  # NCHW shape, channels_last strides


def is_pointwise(m: nn.Module) -> bool:
    return (isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1) and m.stride == (1, 1)
            and m.padding in ((0, 0), "valid") and m.dilation == (1, 1) and m.groups == 1
            and m.padding_mode == "zeros")


def fold_biases(module: nn.Module) -> int:
    """Let every submodule that can fold a convolution's bias into what follows it (a
    ``fold_bias()`` method) do so; returns how many folded."""
    return sum(bool(m.fold_bias()) for m in module.modules() if callable(getattr(m, "fold_bias", None)))


def fuse_modules(module: nn.Module, skip: frozenset[str] = frozenset()) -> int:
    """Let every submodule that can rewrite itself into fewer device passes (a ``fuse()``
    method: folded biases and gate slopes, views instead of copies) do so, except those whose
    class is named in ``skip``; returns how many did."""
    return sum(bool(m.fuse()) for m in module.modules()
               if callable(getattr(m, "fuse", None)) and type(m).__name__ not in skip)


def fuse_activations(module: nn.Module) -> int:
    """For each (1x1 convolution, GELU) pair a submodule names in ``fusable``, once the
    convolution is a PointwiseLinear with a bias: the GELU moves into its GEMM and the module's
    activation becomes the identity. Returns how many pairs were fused."""
    fused = 0
    for m in list(module.modules()):
        for lin_name, act_name in getattr(m, "fusable", ()):
            lin, act = getattr(m, lin_name), getattr(m, act_name)
            if (isinstance(lin, PointwiseLinear) and lin.bias is not None
                    and isinstance(act, nn.GELU) and act.approximate == "none"):
                lin.gelu = True
                setattr(m, act_name, nn.Identity())
                fused += 1
    return fused


def pointwise_as_linear(module: nn.Module, skip: tuple[str, ...] = ()) -> int:
    """Replace every 1x1 convolution under ``module`` (outside the submodules named in
    ``skip``) by a PointwiseLinear in place; returns how many were replaced."""
    skipped = {id(m) for s in skip for m in module.get_submodule(s).modules()}
    replaced = 0
    for parent in list(module.modules()):
        if id(parent) in skipped:
            continue
        for name, child in list(parent.named_children()):
            if is_pointwise(child) and id(child) not in skipped:
                setattr(parent, name, PointwiseLinear(child))
                replaced += 1
    return replaced
