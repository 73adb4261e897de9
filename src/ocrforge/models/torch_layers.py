"""Building blocks shared by the PP-OCRv6 detection and recognition backbones.

Reconstructed from the ONNX graphs (see onnx_weights.py): an HGNetV2-style stem followed by
RepViT-like blocks (depthwise 3x3 token mixer, optional squeeze-excitation, 1x1-GELU-1x1
channel mixer). Every forward is shape-static: no Python branching on tensor values, no
host-side shape constants.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class HardSigmoid(nn.Module):
    """clamp(alpha * x + beta, 0, 1) (ONNX HardSigmoid; Paddle uses alpha 1/6 or 0.2)."""

    def __init__(self, alpha: float, beta: float = 0.5):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x * self.alpha + self.beta, 0.0, 1.0)


class SqueezeExcite(nn.Module):
    """x * hardsigmoid(W2 relu(W1 mean_hw(x))); with residual=True returns x + that."""

    def __init__(self, channels: int, reduced: int, alpha: float, residual: bool = False):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)
        self.gate: nn.Module = HardSigmoid(alpha)
        self.residual = residual
        # a bias the input still lacks (absorb_bias): x + in_bias is what is scaled
        self.register_buffer("in_bias", None)

    @torch.no_grad()
    def fuse(self) -> bool:
        """Fold the gate's slope into ``expand`` so the gate is one kernel (``F.hardsigmoid``
        is clamp(y / 6 + 1/2, 0, 1)): three small launches fewer per block on the GPU."""
        g = self.gate
        if not isinstance(g, HardSigmoid) or g.beta != 0.5:
            return False
        self.expand.weight *= 6.0 * g.alpha
        self.expand.bias *= 6.0 * g.alpha
        self.gate = nn.Hardsigmoid()
        return True

    @torch.no_grad()
    def absorb_bias(self, b: torch.Tensor) -> None:
        """Take over a per-channel bias of the input (the convolution before it then adds
        none): the mean of x + b is mean(x) + b, so W1 b joins the reduce bias, and the output
        (x + b) * s is computed as one fused multiply-add."""
        w1 = self.reduce.weight.reshape(self.reduce.out_channels, -1)
        self.reduce.bias += w1 @ b
        self.in_bias = b.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean(dim=(2, 3), keepdim=True)
        s = self.gate(self.expand(F.relu(self.reduce(s))))
        if self.residual:  # x + x * s in one pass over x
            s = s + 1.0
        if self.in_bias is None:
            return x * s
        return torch.addcmul(self.in_bias.view(1, -1, 1, 1) * s, x, s)


class Stem(nn.Module):
    """Two-branch stem: 3x3/2 conv, then [2x2 max-pool | 2x2 conv -> 2x2 conv] (both 'same'
    padded at the bottom/right), concat, 3x3/2 conv, 1x1 conv. Every conv is followed by ReLU."""

    def __init__(self, mid: int, out: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, mid, 3, stride=2, padding=1)
        self.conv2a = nn.Conv2d(mid, mid // 2, 2)
        self.conv2b = nn.Conv2d(mid // 2, mid, 2)
        self.conv3 = nn.Conv2d(mid * 2, mid, 3, stride=2, padding=1)
        self.conv4 = nn.Conv2d(mid, out, 1)
        self.pool_by_max = False  # fuse()

    @torch.no_grad()
    def fuse(self) -> bool:
        """The 2x2 stride-1 max-pool as two elementwise maxima of shifted views (PyTorch's
        channels-last max-pool kernel is slow with few channels on the GPU)."""
        self.pool_by_max = True
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        # ONNX auto_pad=SAME_UPPER with a 2x2 kernel and stride 1: one row/column at the end;
        # x >= 0 after ReLU, so zero padding gives the same maximum as ONNX's -inf padding
        xp = F.pad(x, (0, 1, 0, 1))  # one padded copy for both branches
        a = F.relu(self.conv2a(xp))
        a = F.relu(self.conv2b(F.pad(a, (0, 1, 0, 1))))
        if self.pool_by_max:
            m = torch.maximum(xp[:, :, :-1], xp[:, :, 1:])
            p = torch.maximum(m[:, :, :, :-1], m[:, :, :, 1:])
        else:
            p = F.max_pool2d(xp, 2, stride=1)
        x = torch.cat([p, a], dim=1)
        x = F.relu(self.conv3(x))
        return F.relu(self.conv4(x))


class MixerBlock(nn.Module):
    """t = dw3x3(x) [* SE(t)]; f = 1x1(GELU(1x1(t))); out = t + f (residual) or f."""

    def __init__(self, cin: int, hidden: int, cout: int, stride: tuple[int, int] = (1, 1),
                 se: bool = False, residual: bool = True):
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin)
        self.se = SqueezeExcite(cin, cin // 4, alpha=1.0 / 6.0) if se else None
        self.pw1 = nn.Conv2d(cin, hidden, 1)
        self.act: nn.Module = nn.GELU()
        self.pw2 = nn.Conv2d(hidden, cout, 1)
        self.residual = residual

    # (1x1 convolution, activation after it): a runtime may compute both in one GEMM
    fusable = (("pw1", "act"),)

    @torch.no_grad()
    def fold_bias(self) -> bool:
        """Move the depthwise convolution's bias into the 1x1 convolutions after it (exact in
        real arithmetic): pw1 sees t + b, so its bias grows by W1 @ b; the residual output
        t + f carries b, so pw2's bias grows by b. On CUDA a convolution's bias is a separate,
        slow broadcasting add (see runtimes/torch_pointwise.py). Not with squeeze-excitation,
        which scales t itself. Returns whether it folded."""
        b = self.dw.bias
        if b is None or self.se is not None:
            return False
        w1 = self.pw1.weight.reshape(self.pw1.out_channels, -1)
        self.pw1.bias += w1 @ b
        if self.residual:
            self.pw2.bias += b
        self.dw.bias = None
        return True

    @torch.no_grad()
    def fuse(self) -> bool:
        """With squeeze-excitation, hand the depthwise bias to it (SqueezeExcite.absorb_bias):
        the broadcasting bias add and the scaling become one pass over t."""
        b = self.dw.bias
        if b is None or self.se is None:
            return False
        self.se.absorb_bias(b)
        self.dw.bias = None
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.dw(x)
        if self.se is not None:
            t = self.se(t)
        f = self.pw2(self.act(self.pw1(t)))
        return t + f if self.residual else f


def build_stages(width: int, stages: list[tuple[tuple[int, int] | None, list[int]]]) -> nn.ModuleList:
    """Stages of MixerBlocks. Each stage is (downsample stride or None, SE flag per block):
    a downsample block doubles the width (dw stride, 1x1 to 2c, GELU, 1x1, no residual), the
    other blocks keep it (1x1 to 2c, GELU, 1x1 back, residual)."""
    out = nn.ModuleList()
    c = width
    for down, se_flags in stages:
        blocks: list[nn.Module] = []
        if down is not None:
            blocks.append(MixerBlock(c, 2 * c, 2 * c, down, se=False, residual=False))
            c *= 2
        blocks += [MixerBlock(c, 2 * c, c, (1, 1), se=bool(f), residual=True) for f in se_flags]
        out.append(nn.Sequential(*blocks))
    return out
