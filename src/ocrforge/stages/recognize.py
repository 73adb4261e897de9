"""Text-line recognition (CTC): width-bucketed batches in, text and confidence out."""

from __future__ import annotations

import math

import cv2
import numpy as np

from ocrforge.models.registry import RecConstants


class RecPreprocessor:
    def __init__(self, constants: RecConstants, max_width: int = 3200, width_step: int = 32,
                 min_width: int | None = None):
        self.height = constants.height
        self.scale = 1.0 / (255.0 * constants.std)
        self.offset = -constants.mean / constants.std
        self.max_width = max_width
        self.width_step = width_step
        self.min_width = constants.width if min_width is None else min_width

    def target_width(self, crop: np.ndarray) -> int:
        h, w = crop.shape[:2]
        return max(1, min(self.max_width, int(math.ceil(self.height * w / max(h, 1)))))

    def batch_width(self, widths: list[int]) -> int:
        w = max(max(widths), self.min_width)
        return min(self.max_width, int(math.ceil(w / self.width_step)) * self.width_step)

    def __call__(self, crops: list[np.ndarray]) -> np.ndarray:
        """Resize every crop to height 48 (aspect kept), pad right with zeros to a shared width."""
        widths = [self.target_width(c) for c in crops]
        bw = self.batch_width(widths)
        out = np.zeros((len(crops), 3, self.height, bw), np.float32)
        for i, (c, w) in enumerate(zip(crops, widths, strict=True)):
            w = min(w, bw)
            r = cv2.resize(c, (w, self.height), interpolation=cv2.INTER_LINEAR).astype(np.float32)
            r *= self.scale
            r += self.offset
            out[i, :, :, :w] = r.transpose(2, 0, 1)
        return out


def width_buckets(crops: list[np.ndarray], batch_size: int) -> list[list[int]]:
    """Indices of crops grouped into batches of similar aspect ratio (sorted by width/height)."""
    order = sorted(range(len(crops)), key=lambda i: crops[i].shape[1] / max(crops[i].shape[0], 1))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


class CTCDecoder:
    def __init__(self, characters: list[str]):
        self.characters = np.array(characters, dtype=object)
        # every class but the blank is one code point: decode a whole batch as one UTF-32 string
        self._codes = (np.array([ord(c) if len(c) == 1 else 0 for c in characters], np.uint32)
                       if all(len(c) == 1 for c in characters[1:]) else None)

    def __call__(self, probs: np.ndarray) -> list[tuple[str, float]]:
        """probs: BxTxC softmax output -> (text, mean confidence of the kept characters)."""
        idx = probs.argmax(axis=2)
        conf = np.take_along_axis(probs, idx[..., None], axis=2)[..., 0]
        return self.collapse(idx, conf)

    def collapse(self, idx: np.ndarray, conf: np.ndarray) -> list[tuple[str, float]]:
        """Greedy CTC on BxT argmax indices and their probabilities: drop blanks and repeats."""
        keep = idx != 0
        keep[:, 1:] &= idx[:, 1:] != idx[:, :-1]
        if self._codes is not None and idx.size and int(idx.max()) < len(self._codes):
            counts = keep.sum(axis=1)
            off = np.concatenate([[0], np.cumsum(counts)])
            text = self._codes[idx[keep]].tobytes().decode("utf-32-le")
            cs = np.concatenate([[0.0], np.cumsum(conf[keep], dtype=np.float64)])
            sums = cs[off[1:]] - cs[off[:-1]]
            return [(text[off[b] : off[b + 1]], float(sums[b] / counts[b])) if counts[b] else ("", 0.0)
                    for b in range(idx.shape[0])]
        out = []
        for b in range(idx.shape[0]):
            k = keep[b]
            if not k.any():
                out.append(("", 0.0))
                continue
            chars = idx[b][k]
            chars = chars[chars < len(self.characters)]
            out.append(("".join(self.characters[chars]), float(conf[b][k].mean())))
        return out
