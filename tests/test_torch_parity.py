"""Native PyTorch networks vs ONNX Runtime FP32 on the same inputs (CPU)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'ocrforge[torch]')")
pytest.importorskip("onnx", reason="the onnx package is needed to import ONNX weights")

import onnxruntime as ort  # noqa: E402

from ocrforge.models.registry import resolve_models  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(2)
    return resolve_models("ppocrv6-small")


def _ort(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _page_like(shape, seed):
    """Normalised input with page-like structure: light background, dark strokes, noise."""
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    x = np.full(shape, 1.8, np.float32)
    for _ in range(12):
        y0, x0 = rng.integers(0, h - 8), rng.integers(0, w // 2)
        x[:, :, y0 : y0 + 6, x0 : x0 + rng.integers(8, w // 2)] = -1.5
    return x + rng.standard_normal(shape).astype(np.float32) * 0.3


def _compare(net, sess, x):
    ref = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    with torch.no_grad():
        out = net(torch.from_numpy(x)).numpy()
    assert out.shape == ref.shape
    assert np.isfinite(out).all()
    return float(np.abs(out - ref).max())


@pytest.mark.parametrize("shape", [(1, 3, 320, 480), (2, 3, 640, 640)])
def test_det_parity(models, shape):
    from ocrforge.models.torch_det import det_from_onnx

    net, sess = det_from_onnx(models.det), _ort(models.det)
    assert _compare(net, sess, _page_like(shape, 1)) <= TOL
    rnd = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    assert _compare(net, sess, rnd) <= TOL


@pytest.mark.parametrize("shape", [(4, 3, 48, 320), (1, 3, 48, 800)])
def test_rec_parity(models, shape):
    from ocrforge.models.torch_rec import rec_from_onnx

    net, sess = rec_from_onnx(models.rec), _ort(models.rec)
    assert _compare(net, sess, _page_like(shape, 3)) <= TOL
    rnd = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    assert _compare(net, sess, rnd) <= TOL


def test_cls_parity(models):
    from ocrforge.models.torch_cls import cls_from_onnx

    net, sess = cls_from_onnx(models.cls), _ort(models.cls)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((8, 3, 48, 192)).astype(np.float32)
        assert _compare(net, sess, x) <= TOL


def test_weight_import_rejects_wrong_architecture(models):
    """Loading a graph into the wrong network must fail, not load silently."""
    from ocrforge.models.onnx_weights import load_into
    from ocrforge.models.torch_det import DetNet

    with pytest.raises(ValueError):
        load_into(DetNet(), models.cls)
