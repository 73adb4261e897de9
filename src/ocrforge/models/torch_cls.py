"""ch_ppocr_mobile_v2.0_cls (0/180 text-line orientation) as a native PyTorch module.

Layout read off ppocrv5/cls/cls.onnx: MobileNetV3-small (scale 0.35) with stride (2, 1)
downsampling, conv + BN everywhere, SE gates with hardsigmoid(0.2 x + 0.5), then 1x1 conv to
200, 2x2 max-pool, global average pool, linear 200 -> 2, softmax.
Input: N x 3 x 48 x 192, normalised as (x / 255 - 0.5) / 0.5.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ocrforge.models.torch_layers import SqueezeExcite


class ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, k: int = 1, stride: tuple[int, int] | int = 1,
                 groups: int = 1, act: str | None = None):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.conv(x))
        if self.act == "relu":
            return F.relu(x)
        if self.act == "hardswish":
            return F.hardswish(x)
        return x


class ResidualUnit(nn.Module):
    def __init__(self, cin: int, mid: int, cout: int, k: int, stride: tuple[int, int],
                 se: bool, act: str):
        super().__init__()
        self.expand = ConvBN(cin, mid, 1, act=act)
        self.dw = ConvBN(mid, mid, k, stride=stride, groups=mid, act=act)
        self.se = SqueezeExcite(mid, mid // 4, alpha=0.2) if se else None
        self.linear = ConvBN(mid, cout, 1)
        self.residual = cin == cout and stride == (1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(self.expand(x))
        if self.se is not None:
            y = self.se(y)
        y = self.linear(y)
        return x + y if self.residual else y


# (cin, mid, cout, kernel, stride, se, act)
CLS_BLOCKS = [
    (8, 8, 8, 3, (2, 1), True, "relu"),
    (8, 24, 8, 3, (2, 1), False, "relu"),
    (8, 32, 8, 3, (1, 1), False, "relu"),
    (8, 32, 16, 5, (2, 1), True, "hardswish"),
    (16, 88, 16, 5, (1, 1), True, "hardswish"),
    (16, 88, 16, 5, (1, 1), True, "hardswish"),
    (16, 40, 16, 5, (1, 1), True, "hardswish"),
    (16, 48, 16, 5, (1, 1), True, "hardswish"),
    (16, 104, 32, 5, (2, 1), True, "hardswish"),
    (32, 200, 32, 5, (1, 1), True, "hardswish"),
    (32, 200, 32, 5, (1, 1), True, "hardswish"),
]


class ClsNet(nn.Module):
    """Text line (N, 3, 48, 192) -> probabilities of (0 degrees, 180 degrees), (N, 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = ConvBN(3, 8, 3, stride=2, act="hardswish")
        self.blocks = nn.Sequential(*[ResidualUnit(*b) for b in CLS_BLOCKS])
        self.last = ConvBN(32, 200, 1, act="hardswish")
        self.fc = nn.Linear(200, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.last(self.blocks(self.stem(x)))
        x = F.max_pool2d(x, 2, 2).mean(dim=(2, 3))
        return torch.softmax(self.fc(x), dim=1)


def cls_from_onnx(path: str | Path) -> ClsNet:
    from ocrforge.models.onnx_weights import load_into

    net = ClsNet()
    load_into(net, path)
    return net.eval()
