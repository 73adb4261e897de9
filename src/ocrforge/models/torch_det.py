"""PP-OCRv6 small text detector (DB) as a native PyTorch module.

Layout read off ppocrv6/small/det/det.onnx:
backbone  Stem(24 -> 48) + 4 stages of MixerBlocks (48, 96, 192, 384 channels, strides 4..32)
neck      RSE-FPN: per level 1x1 conv to 96 + residual SE; top-down nearest x2 + add;
          per level depthwise 7x7 + 1x1 to 24 + residual SE; upsample to 1/4 and concat (96)
head      DB probability branch: 3x3 conv + ReLU, 2x2/2 deconv + ReLU, 2x2/2 deconv, sigmoid
Input: N x 3 x H x W with H, W multiples of 32, normalised with ImageNet mean/std.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ocrforge.models.torch_layers import SqueezeExcite, Stem, build_stages

DET_STAGES = [(None, [1, 0]), ((2, 2), [1, 0]), ((2, 2), [1, 0, 1, 0]), ((2, 2), [1, 0])]


class DetBackbone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = Stem(24, 48)
        self.stages = build_stages(48, DET_STAGES)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        return feats  # strides 4, 8, 16, 32; channels 48, 96, 192, 384


class RSEConv(nn.Module):
    """Conv (no bias) followed by a residual squeeze-excitation: y + y * se(y)."""

    def __init__(self, cin: int, cout: int, kernel: int, depthwise_first: bool = False):
        super().__init__()
        # the 7x7 depthwise (with bias) variant used on the output side of the neck
        self.dw = nn.Conv2d(cin, cin, 7, padding=3, groups=cin) if depthwise_first else None
        self.conv = nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False)
        self.se = SqueezeExcite(cout, cout // 4, alpha=0.2, residual=True)

    @torch.no_grad()
    def fuse(self) -> bool:
        """Move the depthwise bias into the 1x1 convolution after it (conv(x + b) = conv(x) +
        W b), where a GEMM adds it for free instead of a broadcasting add over x."""
        if (self.dw is None or self.dw.bias is None or self.conv.bias is not None
                or self.conv.kernel_size != (1, 1)):
            return False
        w = self.conv.weight.reshape(self.conv.out_channels, -1)
        self.conv.bias = nn.Parameter(w @ self.dw.bias)
        self.dw.bias = None
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dw is not None:
            x = self.dw(x)
        return self.se(self.conv(x))


class DetNeck(nn.Module):
    def __init__(self, in_channels: tuple[int, ...] = (48, 96, 192, 384), width: int = 96):
        super().__init__()
        # ONNX order: level 5, 4, 3, 2 for the inputs, then 5, 4, 3, 2 for the outputs
        self.ins = nn.ModuleList([RSEConv(c, width, 1) for c in reversed(in_channels)])
        self.outs = nn.ModuleList([RSEConv(width, width // 4, 1, depthwise_first=True)
                                   for _ in in_channels])
        self.views = False  # fuse()

    @torch.no_grad()
    def fuse(self) -> bool:
        """Upsample-and-add and upsample-and-concatenate by writing into views of the larger
        tensor (``_add_up``, ``_cat_up``): no upsampled copies in between."""
        self.views = True
        return True

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        c2, c3, c4, c5 = feats
        in5, in4, in3, in2 = (m(f) for m, f in zip(self.ins, (c5, c4, c3, c2), strict=True))
        if self.views:
            out4 = _add_up(in4, in5)
            out3 = _add_up(in3, out4)
            out2 = _add_up(in2, out3)
        else:
            out4 = in4 + F.interpolate(in5, scale_factor=2.0, mode="nearest")
            out3 = in3 + F.interpolate(out4, scale_factor=2.0, mode="nearest")
            out2 = in2 + F.interpolate(out3, scale_factor=2.0, mode="nearest")
        p5, p4, p3, p2 = (m(f) for m, f in zip(self.outs, (in5, out4, out3, out2), strict=True))
        if self.views:
            return _cat_up([p5, p4, p3, p2])
        return torch.cat([
            F.interpolate(p5, scale_factor=8.0, mode="nearest"),
            F.interpolate(p4, scale_factor=4.0, mode="nearest"),
            F.interpolate(p3, scale_factor=2.0, mode="nearest"),
            p2,
        ], dim=1)


def _blocks(t: torch.Tensor, f: int) -> torch.Tensor:
    """(n, c, h*f, w*f) seen as (n, c, h, f, w, f): a view in either memory format."""
    n, c, hh, ww = t.shape
    return t.view(n, c, hh // f, f, ww // f, f)


def _add_up(big: torch.Tensor, small: torch.Tensor) -> torch.Tensor:
    """big + nearest-x2(small), written into ``big`` (a fresh activation nothing else holds)."""
    _blocks(big, 2).add_(small[:, :, :, None, :, None])
    return big


def _cat_up(parts: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate parts along channels, each upsampled (nearest) to the last one's size."""
    last = parts[-1]
    n, _, hh, ww = last.shape
    fmt = (torch.channels_last if last.is_contiguous(memory_format=torch.channels_last)
           and not last.is_contiguous() else torch.contiguous_format)
    out = torch.empty((n, sum(p.shape[1] for p in parts), hh, ww), dtype=last.dtype,
                      device=last.device, memory_format=fmt)
    c0 = 0
    for p in parts:
        f = hh // p.shape[2]
        _blocks(out[:, c0:c0 + p.shape[1]], f).copy_(p[:, :, :, None, :, None])
        c0 += p.shape[1]
    return out


class DBHead(nn.Module):
    def __init__(self, cin: int = 96, mid: int = 24):
        super().__init__()
        self.conv = nn.Conv2d(cin, mid, 3, padding=1)
        self.up1 = nn.ConvTranspose2d(mid, mid, 2, stride=2)
        self.up2 = nn.ConvTranspose2d(mid, 1, 2, stride=2)

    @torch.no_grad()
    def fuse(self) -> bool:
        """Both 2x2 stride-2 transposed convolutions as GEMMs over pixel rows (each input
        pixel maps to its own 2x2 output block, so the two products chain without rearranging
        the half-resolution map in between), bias and ReLU in the first GEMM's epilogue: no
        separate bias, ReLU or layout passes at half and full resolution."""
        for up in (self.up1, self.up2):
            if up.kernel_size != (2, 2) or up.stride != (2, 2) or up.padding != (0, 0):
                return False
        # (C_in, C_out, i, j) -> (C_in, (i, j, C_out)): column (2 i + j) * C_out + c_out
        for k, up in ((1, self.up1), (2, self.up2)):
            g = up.weight.permute(0, 2, 3, 1).reshape(up.in_channels, -1)
            self.register_buffer(f"g{k}", g.contiguous().clone())
            self.register_buffer(f"b{k}", up.bias.repeat(4).clone())
        self.up1 = self.up2 = None
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv(x))
        if self.up1 is None:
            return self._up_by_gemms(x)
        x = F.relu(self.up1(x))
        return torch.sigmoid(self.up2(x))

    def _up_by_gemms(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        rows = x.permute(0, 2, 3, 1).reshape(n * h * w, c)  # a view when x is channels_last
        if rows.is_cuda:  # cuBLASLt's bias + ReLU epilogue
            y = torch._addmm_activation(self.b1, rows, self.g1)
        else:
            y = F.relu(torch.addmm(self.b1, rows, self.g1))
        # rows of y: pixel (n, h, w) then sub-pixel (i, j); the second GEMM works per row
        y = torch.addmm(self.b2, y.view(-1, self.g1.shape[1] // 4), self.g2)
        y = torch.sigmoid(y).view(n, h, w, 2, 2, 2, 2)  # (.., i, j, i2, j2)
        return y.permute(0, 1, 3, 5, 2, 4, 6).reshape(n, 1, 4 * h, 4 * w)


class DetNet(nn.Module):
    """Page (N, 3, H, W) -> text probability map (N, 1, H, W)."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = DetBackbone()
        self.neck = DetNeck()
        self.head = DBHead()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.neck(self.backbone(x)))


def det_from_onnx(path: str | Path) -> DetNet:
    from ocrforge.models.onnx_weights import load_into

    net = DetNet()
    load_into(net, path)
    return net.eval()
