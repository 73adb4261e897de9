"""Cut each detected quadrilateral out of the page as an upright, horizontal crop."""

from __future__ import annotations

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
