"""Depthwise convolutions by PyTorch's own CUDA kernel instead of cuDNN (opt-in, CUDA only).

The GPU profile showed the driver thread spending most of an eager run of a new input shape in
the networks' depthwise convolutions: cuDNN builds an execution plan per convolution and shape,
and PyTorch caches the plans per thread, so each new shape (and each new driver thread) paid for
it again; a CUDA graph capture's warm-up runs paid it too (H100, 2026-12-06, docs/BENCHMARKS.md).
``aten._conv_depthwise2d`` needs no plan. It takes NCHW, so the channels-last activations are
converted on the way in and out.

Its kernels are slower than cuDNN's (8.17 against 5.29 ms of device time a page, H100), so
``first_use`` mode keeps them for eager calls only (a shape's first uses, before its CUDA graph
exists): a graph's warm-ups and capture (``cudnn_here``) run cuDNN, in the thread that captures,
which is where its plans are built.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

_HERE = threading.local()


@contextmanager
def cudnn_here() -> Iterator[None]:
    """In this thread, first-use depthwise convolutions run cuDNN (graph warm-ups, captures)."""
    before = getattr(_HERE, "cudnn", False)
    _HERE.cudnn = True
    try:
        yield
    finally:
        _HERE.cudnn = before


class NativeDepthwise(nn.Module):
    """A depthwise ``nn.Conv2d`` computed by ``aten._conv_depthwise2d`` on CUDA tensors; with
    ``first_use``, by cuDNN inside ``cudnn_here`` (what CUDA graphs capture)."""

    def __init__(self, conv: nn.Conv2d, first_use: bool = False):
        super().__init__()
        self.first_use = first_use
        self.weight = nn.Parameter(conv.weight.detach().clone())
        self.bias = None if conv.bias is None else nn.Parameter(conv.bias.detach().clone())
        self.kernel_size, self.stride = conv.kernel_size, conv.stride
        self.padding, self.dilation, self.groups = conv.padding, conv.dilation, conv.groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or (self.first_use and getattr(_HERE, "cudnn", False)):
            return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                            self.groups)
        y = torch.ops.aten._conv_depthwise2d(x.contiguous(), self.weight, list(self.kernel_size),
                                             self.bias, list(self.stride), list(self.padding),
                                             list(self.dilation))
        return y.contiguous(memory_format=torch.channels_last)


def is_depthwise(m: nn.Module) -> bool:
    return (isinstance(m, nn.Conv2d) and m.groups > 1 and m.groups == m.in_channels == m.out_channels
            and m.padding_mode == "zeros" and isinstance(m.padding, tuple))


def depthwise_native(module: nn.Module, first_use: bool = False) -> int:
    """Replace every depthwise convolution under ``module`` by a NativeDepthwise in place;
    returns how many were replaced."""
    replaced = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if is_depthwise(child):
                setattr(parent, name, NativeDepthwise(child, first_use))
                replaced += 1
    return replaced
