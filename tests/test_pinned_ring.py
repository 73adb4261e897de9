"""The pinned upload ring (scheduling/pinned_ring.py): CUDA only."""

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_ring_uploads_stay_intact_while_copies_queue_behind_device_work():
    from ocrforge.scheduling.pinned_ring import PinnedRing

    ring = PinnedRing(torch.device("cuda"), slots=4, slot_bytes=2048)
    rng = np.random.default_rng(0)
    a = torch.randn(2048, 2048, device="cuda")
    sent, got = [], []
    for i in range(64):
        if i % 8 == 0:  # keep the stream busy, so copies are still queued when slots come round
            for _ in range(20):
                a = a @ a / 2048
        arr = rng.standard_normal((rng.integers(1, 50), 10))  # float64; those of 26+ rows exceed a slot
        sent.append(arr)
        got.append(ring.upload(arr))
    torch.cuda.synchronize()
    for arr, t in zip(sent, got, strict=True):
        assert t.dtype == torch.float64 and tuple(t.shape) == arr.shape
        np.testing.assert_array_equal(t.cpu().numpy(), arr)
    assert ring.waits > 0 and ring.oversize > 0
