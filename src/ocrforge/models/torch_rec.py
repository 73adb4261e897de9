"""PP-OCRv6 small text recogniser (CTC) as a native PyTorch module.

Layout read off ppocrv6/small/rec/rec.onnx:
backbone  Stem(48 -> 96) + 3 stages of MixerBlocks (96, 192, 384 channels; the two
          downsamples stride (2, 1) so the width keeps 1/4 resolution), then 3x2 average pool
          -> N x 384 x 1 x W/8
neck      shortcut 1x1 conv + BN + SiLU (120); main path 1x1 conv + BN + SiLU, plus a residual
          1x7 depthwise conv + BN + SiLU, then 2 pre-norm transformer blocks (dim 120,
          8 heads, MLP 240, SiLU) and a final LayerNorm; added to the shortcut
head      linear 120 -> classes, softmax
Input: N x 3 x 48 x W, normalised as (x / 255 - 0.5) / 0.5.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ocrforge.models.torch_layers import Stem, build_stages

REC_STAGES = [(None, [1, 0, 0]), ((2, 1), [1, 0, 1, 0, 1, 0]), ((2, 1), [1, 0])]


class ConvBNSiLU(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: tuple[int, int] = (1, 1), groups: int = 1):
        super().__init__()
        pad = (kernel[0] // 2, kernel[1] // 2)
        self.conv = nn.Conv2d(cin, cout, kernel, padding=pad, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.bn(self.conv(x)))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp)
        self.fc2 = nn.Linear(mlp, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.silu(self.fc1(self.norm2(x))))


class RecNeck(nn.Module):
    def __init__(self, cin: int = 384, dim: int = 120, depth: int = 2, heads: int = 8, mlp: int = 240):
        super().__init__()
        self.shortcut = ConvBNSiLU(cin, dim)
        self.proj = ConvBNSiLU(cin, dim)
        self.local = ConvBNSiLU(dim, dim, (1, 7), groups=dim)
        self.blocks = nn.ModuleList([TransformerBlock(dim, heads, mlp) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        short = self.shortcut(x)
        z = self.proj(x)
        z = z + self.local(z)
        b, c, h, w = z.shape
        t = z.flatten(2).transpose(1, 2)  # N x (H*W) x C
        for blk in self.blocks:
            t = blk(t)
        t = self.norm(t)
        z = t.reshape(b, h, w, c).permute(0, 3, 1, 2)
        return z + short


class RecNet(nn.Module):
    """Text line (N, 3, 48, W) -> per-step class probabilities (N, W/8, classes)."""

    # logits feed a softmax: BF16's 8-bit mantissa is kept out of them. In FP16 (weights and
    # logits; softmax in FP32) the dev set's 127,980 steps changed 2 argmaxes and no line
    # (benchmarks/rec_head_precision.py); in FP32 its FFMA GEMM took 12 % of a 128 x 320 batch
    # on the H200 (benchmarks/gpu_ops.py)
    keep_fp32 = ("head",)
    fp16_safe = ("head",)

    def __init__(self, num_classes: int = 18710):
        super().__init__()
        self.stem = Stem(48, 96)
        self.stages = build_stages(96, REC_STAGES)
        self.pool = nn.AvgPool2d((3, 2), (3, 2))
        self.neck = RecNeck()
        self.head = nn.Linear(120, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """What the head reads: (N, T, 120) per step."""
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        x = self.neck(self.pool(x))  # N x 120 x 1 x T
        return x.squeeze(2).transpose(1, 2)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in the logits' precision (accumulated in FP32): under FP16, half the bytes of an FP32
        # softmax to write and for the CTC head to read (N x T x 18,710 a batch, 17 of 294 ms
        # of kernels for 64 pages on the H100 with both in FP32). FP16 probabilities changed 2
        # of the dev set's 127,980 step argmaxes and no line (benchmarks/rec_head_precision.py)
        return torch.softmax(self.logits(x), dim=2)


def rec_from_onnx(path: str | Path) -> RecNet:
    from ocrforge.models.onnx_weights import load_into, read_entries

    head = [e for e in read_entries(path) if e.kind == "linear"][-1]
    net = RecNet(num_classes=head.tensors[0].shape[0])
    load_into(net, path)
    return net.eval()
