"""Cut each detected quadrilateral out of the page as an upright, horizontal crop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import cv2
import numpy as np

VERTICAL_RATIO = 1.5  # crops at least this much taller than wide are turned by 90 degrees


def crop_quad(img: np.ndarray, quad: np.ndarray) -> np.ndarray:
    """Perspective-warp the quad (tl, tr, br, bl) to a rectangle; turn tall crops 90 degrees."""
    q = quad.astype(np.float32)
    w = int(max(np.linalg.norm(q[0] - q[1]), np.linalg.norm(q[2] - q[3])))
    h = int(max(np.linalg.norm(q[0] - q[3]), np.linalg.norm(q[1] - q[2])))
    w, h = max(w, 1), max(h, 1)
    dst = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float32)
    m = cv2.getPerspectiveTransform(q, dst)
    crop = cv2.warpPerspective(img, m, (w, h), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
    if h / w >= VERTICAL_RATIO:
        crop = np.ascontiguousarray(np.rot90(crop))
    return crop


def line_sizes(quads: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(w, h, turned) of each quad's crop exactly as crop_quad computes them (k x 4 x 2 in)."""
    q = quads.astype(np.float32)
    nrm = np.linalg.norm
    w = np.maximum(np.maximum(nrm(q[:, 0] - q[:, 1], axis=1), nrm(q[:, 2] - q[:, 3], axis=1)).astype(np.int64), 1)
    h = np.maximum(np.maximum(nrm(q[:, 0] - q[:, 3], axis=1), nrm(q[:, 1] - q[:, 2], axis=1)).astype(np.int64), 1)
    return w, h, h / w >= VERTICAL_RATIO


@dataclass
class LineGroup:
    """Lines of one page cut by one grid_sample: their indices, and per line the network pixel
    -> page map (3 x 3, row-major) followed by the text width (k x 10, float64)."""
    lines: np.ndarray
    coef: np.ndarray
    wmax: int  # the widest bucket width of the group: the crops' width


@dataclass
class CropPlan:
    """The host half of crop_lines_torch for one page: no device work, so any thread can make
    it (the GPU scheduler's contour workers do, off the driver thread)."""
    buckets: np.ndarray  # per line: its recognition width bucket
    tws: np.ndarray  # per line: its text width in network pixels
    groups: list[LineGroup]


def plan_crops(quads: np.ndarray, rec: Any, width: int, height: int, split: bool = True) -> CropPlan:
    """Sizes, width buckets and page maps of the lines (k x 4 x 2 quads) of a width x height
    page. Lines are sorted by bucket width; a page with a few wide lines among many narrow ones
    is cut in two groups (``split``), narrow and wide, so the narrow lines are not padded to
    the widest one's width in device memory."""
    w, h, vert = line_sizes(quads)
    cw_, ch_ = np.where(vert, h, w), np.where(vert, w, h)  # size of the (turned) crop
    tws = np.array([rec.text_width(int(a), int(b)) for a, b in zip(ch_, cw_, strict=True)])
    buckets = np.array([rec.bucket(int(t)) for t in tws])
    order = np.argsort(buckets, kind="stable")
    cut = _width_split(buckets[order]) if split else 0
    groups = []
    for g in ((order[:cut], order[cut:]) if cut else (order,)):
        hom = line_homographies(quads[g], w[g], h[g], vert[g], tws[g], rec.height, width, height)
        coef = np.concatenate([hom.reshape(len(g), 9), tws[g][:, None]], axis=1)
        groups.append(LineGroup(g, coef, int(buckets[g].max())))
    return CropPlan(buckets, tws, groups)


def crop_lines_torch(img: Any, quads: np.ndarray, rec: Any, dtype: Any, mode: str = "bicubic",
                     split: bool = True) -> list[tuple[int, int, Any, int, int]]:
    """Device-side twin of crop_quad + RecPreprocessor for all lines of one page at once.

    ``img`` is the page as a 3 x H x W uint8 tensor. Returns, per line, (line index, bucket
    width, crops, row, text width): ``crops[row]`` is the line as a 3 x 48 x W tensor of
    normalised pixels (zero right of its text width, in network pixels), W at least the bucket
    width; with ``dtype`` uint8, of grey levels rounded as the host path's, nothing masked
    (``normalise_lines`` does both). Lines go out in one grid_sample per group (plan_crops)."""
    plan = plan_crops(quads, rec, int(img.shape[2]), int(img.shape[1]), split)
    return cut_planned(img, plan, rec, dtype, mode)


def cut_planned(img: Any, plan: CropPlan, rec: Any, dtype: Any, mode: str = "bicubic",
                upload: Callable[[np.ndarray], Any] | None = None) -> list[tuple[int, int, Any, int, int]]:
    """The device half of crop_lines_torch. ``upload`` puts a group's coefficients on the
    page's device (default: a fresh pinned copy; the GPU scheduler passes a pinned ring)."""
    out = []
    src = img.unsqueeze(0).float() if plan.groups else None  # once per page, not per group
    for g in plan.groups:
        coef = upload(g.coef) if upload is not None else _upload(g.coef, img.device)
        crops = _sample_lines(src, coef, g.wmax, rec, dtype, mode)
        out += [(int(li), int(plan.buckets[li]), crops, row, int(plan.tws[li]))
                for row, li in enumerate(g.lines)]
    return out


def _upload(coef: np.ndarray, dev: Any) -> Any:
    import torch

    host = torch.from_numpy(coef)
    return host.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else host


def _width_split(widths: np.ndarray) -> int:
    """Where to cut lines sorted by bucket width into a narrow and a wide group (0: keep one),
    when that saves at least 40 % of the line pixels held (k x widest)."""
    k = len(widths)
    if k < 2:
        return 0
    cells = np.arange(1, k) * widths[:-1] + (k - np.arange(1, k)) * widths[-1]
    best = int(np.argmin(cells))
    return best + 1 if cells[best] < 0.6 * k * widths[-1] else 0


def _sample_lines(src: Any, coef: Any, wmax: int, rec: Any, dtype: Any, mode: str) -> Any:
    """The lines of the page (``src``: 1 x 3 x H x W float32) as one (k, 3, 48, wmax) tensor
    (one grid_sample). ``coef`` (k x 10, float64 on the device) holds each line's map from
    network pixel to grid_sample's page coordinates, one homography composed on the host, so
    the device work is a handful of launches whatever k is (the driver thread issues every one
    of them). The grid is evaluated by float32 elementwise products (IEEE float32, never TF32 as
    a matrix product may be), written into one k x 48 x wmax x 2 tensor: with its temporaries
    20 bytes a line pixel where the float64 products held 48 (1.0 GiB of the H100's 5.6 GiB
    peak, docs/BENCHMARKS.md). Against the float64 grid, crops of 960 dev-set lines differ by
    at most 1.5e-4 (normalised pixels), below FP16's step."""
    import torch
    import torch.nn.functional as F

    hs = rec.height
    k = int(coef.shape[0])
    grid = _line_grid(coef, hs, wmax)
    crops = F.grid_sample(src, grid.view(1, k * hs, wmax, 2), mode=mode,
                          padding_mode="border", align_corners=False)[0]
    if mode == "bicubic":
        crops.clamp_(0.0, 255.0)
    if dtype == torch.uint8:  # grey levels, as the host path's crops: normalised and masked later
        crops = crops.round_().view(3, k, hs, wmax).transpose(0, 1)
        return crops.to(dtype=dtype, memory_format=torch.contiguous_format)
    crops.mul_(float(rec.scale)).add_(float(rec.offset))
    crops = crops.view(3, k, hs, wmax).transpose(0, 1)
    u = torch.arange(wmax, device=src.device, dtype=torch.float64).view(1, 1, 1, wmax)
    crops.masked_fill_(u >= coef[:, 9].view(k, 1, 1, 1), 0.0)  # zero right of the text
    return crops.to(dtype=dtype, memory_format=torch.contiguous_format)


def _line_grid(coef: Any, hs: int, wmax: int) -> Any:
    """grid_sample's (x, y) for every pixel (u, v) of k lines of hs x wmax: the homography
    (c0 u + c1 v + c2, c3 u + c4 v + c5) / (c6 u + c7 v + c8) of each line's coefficients.
    The three rows are evaluated together (k x hs x wmax x 3, then one division): a few
    launches whatever k is, since the driver thread pays for each one."""
    import torch

    k, dev = int(coef.shape[0]), coef.device
    h = coef[:, :9].float().view(k, 1, 1, 3, 3)  # per line: rows x, y, den; columns u, v, 1
    u = _ramp(wmax, dev).view(1, 1, wmax, 1)
    v = _ramp(hs, dev).view(1, hs, 1, 1)
    p = torch.addcmul(torch.addcmul(h[..., 2], h[..., 0], u), h[..., 1], v)
    return p[..., :2] / p[..., 2:]


@lru_cache(maxsize=64)
def _ramp(n: int, dev: Any) -> Any:
    """0, 1, ..., n - 1 as float32 on ``dev`` (kept: line widths and heights repeat)."""
    import torch

    return torch.arange(n, device=dev, dtype=torch.float32)


def line_homographies(quads: np.ndarray, w: np.ndarray, h: np.ndarray, vert: np.ndarray,
                      tws: np.ndarray, hs: int, W: int, H: int) -> np.ndarray:
    """k x 3 x 3: network pixel (u, v, 1) of each line -> grid_sample's normalised page
    coordinates, as crop_quad + cv2.resize map pixel centres (float64).

    Network pixel -> (turned) crop pixel: x = (u + 0.5) cw / tw - 0.5, y = (v + 0.5) ch / hs - 0.5;
    a vertical crop was turned by np.rot90, so crop (x, y) = (w - 1 - y', x'); then crop ->
    page by the quad's perspective transform; then page pixel -> [-1, 1] (align_corners=False)."""
    k = len(quads)
    cw, ch = np.where(vert, h, w).astype(np.float64), np.where(vert, w, h).astype(np.float64)
    sx, sy = cw / tws, ch / hs
    ox, oy = 0.5 * sx - 0.5, 0.5 * sy - 0.5
    a = np.zeros((k, 3, 3))
    a[:, 2, 2] = 1.0
    flat = ~vert
    a[flat, 0, 0], a[flat, 0, 2], a[flat, 1, 1], a[flat, 1, 2] = sx[flat], ox[flat], sy[flat], oy[flat]
    a[vert, 0, 1], a[vert, 0, 2] = -sy[vert], w[vert] - 1 - oy[vert]
    a[vert, 1, 0], a[vert, 1, 2] = sx[vert], ox[vert]
    norm = np.array([[2.0 / W, 0.0, 1.0 / W - 1.0], [0.0, 2.0 / H, 1.0 / H - 1.0], [0.0, 0.0, 1.0]])
    return norm @ perspective_batch(w, h, quads) @ a


def perspective_batch(w: np.ndarray, h: np.ndarray, quads: np.ndarray) -> np.ndarray:
    """Batched cv2.getPerspectiveTransform from the rectangles (0,0)-(w,h) to the quads."""
    k = len(w)
    src = np.zeros((k, 4, 2), np.float64)
    src[:, 1, 0] = w
    src[:, 2, 0] = w
    src[:, 2, 1] = h
    src[:, 3, 1] = h
    dst = quads.astype(np.float64)
    a = np.zeros((k, 8, 8))
    b = np.zeros((k, 8))
    for i in range(4):
        x, y = src[:, i, 0], src[:, i, 1]
        u, v = dst[:, i, 0], dst[:, i, 1]
        a[:, i, 0], a[:, i, 1], a[:, i, 2] = x, y, 1
        a[:, i, 6], a[:, i, 7] = -x * u, -y * u
        a[:, i + 4, 3], a[:, i + 4, 4], a[:, i + 4, 5] = x, y, 1
        a[:, i + 4, 6], a[:, i + 4, 7] = -x * v, -y * v
        b[:, i], b[:, i + 4] = u, v
    try:
        sol = np.linalg.solve(a, b[..., None])[..., 0]
    except np.linalg.LinAlgError:  # a degenerate quad somewhere: per quad, as OpenCV does
        return np.stack([cv2.getPerspectiveTransform(src[i].astype(np.float32),
                                                     dst[i].astype(np.float32)) for i in range(k)])
    return np.concatenate([sol, np.ones((k, 1))], axis=1).reshape(k, 3, 3)


def normalise_lines(x: Any, widths: Any, rec: Any) -> None:
    """In place: ``x`` (N x 3 x 48 x W, grey levels in a float dtype) to normalised pixels,
    zero right of each row's text width (``widths``, N integers on the device), as the crops
    of ``cut_planned`` in a float dtype are."""
    import torch

    # (g - 127.5) is exact in FP16 and BF16, so the product is the one rounding, as when
    # crops are normalised in float32 and converted
    x.add_(float(rec.offset) / float(rec.scale)).mul_(float(rec.scale))
    u = torch.arange(x.shape[3], device=x.device, dtype=widths.dtype).view(1, 1, 1, -1)
    x.masked_fill_(u >= widths.view(-1, 1, 1, 1), 0.0)
