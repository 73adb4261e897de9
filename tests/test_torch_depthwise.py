"""Depthwise convolutions swapped for NativeDepthwise compute the same network (CPU here: the
module falls back to F.conv2d; on CUDA it calls aten._conv_depthwise2d, tested with -m gpu)."""

import pytest
import torch

from ocrforge.models.torch_layers import MixerBlock
from ocrforge.runtimes.torch_depthwise import NativeDepthwise, cudnn_here, depthwise_native


def _block() -> torch.nn.Module:
    torch.manual_seed(0)
    return MixerBlock(16, 32, 16, stride=(2, 1)).eval()


@pytest.mark.parametrize("first_use", [False, True])
def test_depthwise_native_replaces_only_depthwise_convolutions(first_use):
    net = _block()
    x = torch.randn(2, 16, 12, 20)
    want = net(x)
    assert depthwise_native(net, first_use) == 1
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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_first_use_depthwise_is_native_outside_captures_and_cudnn_inside():
    """OCRFORGE_TORCH_DEPTHWISE=first_use: eager calls get the native kernel (no cuDNN plan to
    build), a graph's warm-ups and capture (cudnn_here) get cuDNN's, bit for bit."""
    x = torch.randn(4, 16, 48, 320, device="cuda", dtype=torch.half).contiguous(
        memory_format=torch.channels_last)

    def net(mode: str | None) -> torch.nn.Module:
        m = _block().cuda().half().to(memory_format=torch.channels_last)
        if mode:
            depthwise_native(m, first_use=mode == "first_use")
        return m

    with torch.inference_mode():
        cudnn, native, first = net(None)(x), net("native")(x), net("first_use")
        if torch.equal(cudnn, native):
            pytest.skip("the two kernels agree bit for bit on this input: nothing to tell apart")
        assert torch.equal(first(x), native)
        with cudnn_here():
            assert torch.equal(first(x), cudnn)
