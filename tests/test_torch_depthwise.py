"""Depthwise convolutions swapped for NativeDepthwise compute the same network (CPU here: the
module falls back to F.conv2d; on CUDA it calls aten._conv_depthwise2d, tested with -m gpu)."""

import pytest
import torch

from ocrforge.models.torch_layers import MixerBlock
from ocrforge.runtimes.torch_depthwise import NativeDepthwise, depthwise_native


def _block() -> torch.nn.Module:
    torch.manual_seed(0)
    return MixerBlock(16, 32, 16, stride=(2, 1)).eval()


def test_depthwise_native_replaces_only_depthwise_convolutions():
    net = _block()
    x = torch.randn(2, 16, 12, 20)
    want = net(x)
    assert depthwise_native(net) == 1
    assert isinstance(net.dw, NativeDepthwise)
    assert not any(isinstance(m, torch.nn.Conv2d) and m.groups > 1 for m in net.modules())
    torch.testing.assert_close(net(x), want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_native_depthwise_matches_cudnn():
    net = _block().cuda().half().to(memory_format=torch.channels_last)
    x = torch.randn(4, 16, 48, 320, device="cuda", dtype=torch.half).contiguous(
        memory_format=torch.channels_last)
    with torch.inference_mode():
        want = net(x)
        depthwise_native(net)
        got = net(x)
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=1e-2)
