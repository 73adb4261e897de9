"""Text-line recognition (CTC): width-bucketed batches in, text and confidence out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from ocrforge.models.registry import RecConstants


def _tails(start: int, end: int, pow2: bool) -> list[tuple[int, int]]:
    """[start, end) as one slice, or as slices of decreasing powers of two."""
    if not pow2:
        return [(start, end)] if start < end else []
    out = []
    while start < end:
        n = 1 << ((end - start).bit_length() - 1)
        out.append((start, start + n))
        start += n
    return out


class RecPreprocessor:
    """Text-line crops -> normalised (N, 3, 48, W) batches.

    Every line is padded to its own *bucket width* (a function of the line alone: the next
    multiple of ``width_step`` at or above ``min_width``, or the next value of an explicit
    ``widths`` list), and a batch holds lines of one bucket. So a line reads the same whatever
    else is in its batch: read(), read_many(), the CPU and the GPU schedulers agree.
    """

    def __init__(self, constants: RecConstants, max_width: int = 3200, width_step: int = 32,
                 min_width: int | None = None, widths: list[int] | tuple[int, ...] | None = None,
                 pow2_tails: bool = False):
        self.height = constants.height
        self.mean = constants.mean
        self.std = constants.std
        self.scale = 1.0 / (255.0 * constants.std)
        self.offset = -constants.mean / constants.std
        self.max_width = max_width
        self.width_step = width_step
        self.min_width = constants.width if min_width is None else min_width
        self.widths = tuple(sorted(w for w in widths if w >= self.min_width)) if widths else None
        # the last lines of a bucket in batches of 8, 4, 2, 1 rather than one batch of any
        # size: input shapes that recur, for a runtime that prepares each new shape anew
        self.pow2_tails = pow2_tails

    def text_width(self, h: float, w: float) -> int:
        """Width of a line of this (h, w) once resized to the network height (at most max_width)."""
        return max(1, min(self.max_width, int(math.ceil(self.height * w / max(h, 1)))))

    def target_width(self, crop: np.ndarray) -> int:
        h, w = crop.shape[:2]
        return self.text_width(h, w)

    def bucket(self, text_width: int) -> int:
        w = max(text_width, self.min_width)
        if self.widths:
            for b in self.widths:
                if w <= b:
                    return b
        return int(math.ceil(w / self.width_step)) * self.width_step

    def batch_width(self, widths: list[int]) -> int:
        return max(self.bucket(w) for w in widths)

    def groups(self, crops: list[np.ndarray], batch_size: int, max_pixels: int | None = None
               ) -> list[tuple[int, list[int]]]:
        """(bucket width, crop indices) batches: lines of one bucket, at most batch_size each
        and at most ``max_pixels`` line pixels (lines x bucket width; at least one line)."""
        by: dict[int, list[int]] = {}
        for i, c in enumerate(crops):
            by.setdefault(self.bucket(self.target_width(c)), []).append(i)
        out = []
        for w, idx in sorted(by.items()):
            n = batch_size if max_pixels is None else max(1, min(batch_size, max_pixels // w))
            full = len(idx) - len(idx) % n
            out += [(w, idx[k : k + n]) for k in range(0, full, n)]
            out += [(w, idx[a:b]) for a, b in _tails(full, len(idx), self.pow2_tails)]
        return out

    def __call__(self, crops: list[np.ndarray], width: int | None = None) -> np.ndarray:
        """Resize every crop to height 48 (aspect kept), pad right with zeros to ``width``
        (default: the widest bucket among them)."""
        widths = [self.target_width(c) for c in crops]
        bw = width or self.batch_width(widths)
        out = np.zeros((len(crops), 3, self.height, bw), np.float32)
        for i, (c, w) in enumerate(zip(crops, widths, strict=True)):
            w = min(w, bw)
            r = cv2.resize(c, (w, self.height), interpolation=cv2.INTER_LINEAR).astype(np.float32)
            r *= self.scale
            r += self.offset
            out[i, :, :, :w] = r.transpose(2, 0, 1)
        return out


def ctc_head_torch(probs: Any) -> tuple[Any, Any]:
    """(N, T, C) per-step probabilities (device tensor) -> argmax class (int32) and its
    probability (float32) per step: only these leave the device."""
    conf, idx = probs.max(dim=2)
    return idx.to(dtype=_torch().int32), conf.float()


class CTCHeadPost:
    """``ctc_head_torch`` as a runtime ``post`` (run inside recognition's CUDA graph, so the
    N x T x classes probabilities never outlive the graph): (indices, scores) per step, plus
    the space class's probability per step when ``space_index`` is given (word spaces).

    On a network with ``features`` and ``head`` (RecNet) the runtime calls ``through``: the
    head, softmax and top-1 run on ``steps_per_piece`` steps at a time, so the logits and
    probabilities of a whole batch never exist at once (128 lines x 160 steps x 18,710
    classes are 0.77 GB each in FP16, all inside the graph's memory pool)."""

    def __init__(self, space_index: int | None = None, steps_per_piece: int = 2048):
        self.space_index = space_index
        self.steps_per_piece = steps_per_piece

    def __call__(self, probs: Any, _x: Any) -> tuple:
        torch = _torch()
        idx, conf = ctc_head_torch(probs)
        if self.space_index is None:
            return idx, conf
        # a copy, not a view: a view would keep the whole probability tensor alive as the
        # graph's output (5.6 GB kept by three rec graphs on the H200, 2026-12-04)
        return idx, conf, probs[:, :, self.space_index].to(torch.float32, copy=True)

    def through(self, net: Any, x: Any) -> tuple:
        """The network on ``x``, reduced as ``__call__`` would, a few lines at a time."""
        torch = _torch()
        if not (hasattr(net, "features") and hasattr(net, "head")):
            return self(net(x), x)
        feats = net.features(x)
        rows = max(1, self.steps_per_piece // max(1, feats.shape[1]))
        parts = [self(torch.softmax(net.head(feats[i : i + rows]), dim=2), x)
                 for i in range(0, feats.shape[0], rows)]
        if len(parts) == 1:
            return parts[0]
        return tuple(torch.cat(cols) for cols in zip(*parts, strict=True))


def _torch() -> Any:
    import torch

    return torch


def space_class(characters: list[str]) -> int | None:
    """Index of the space class in a CTC alphabet (None: the alphabet has none)."""
    return characters.index(" ") if " " in characters else None


class CTCDecoder:
    def __init__(self, characters: list[str]):
        self.characters = np.array(characters, dtype=object)
        # every class but the blank is one code point: decode a whole batch as one UTF-32 string
        self._codes = (np.array([ord(c) if len(c) == 1 else 0 for c in characters], np.uint32)
                       if all(len(c) == 1 for c in characters[1:]) else None)
        self.space_index = space_class(characters)

    def head(self, out: np.ndarray | tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(argmax class, its probability, the space class's probability) per step, from the
        network's output: the B x T x C probabilities, or what a runtime opened with ``top1``
        returns (indices, probabilities[, space column])."""
        if isinstance(out, tuple):
            return out[0], out[1], out[2] if len(out) > 2 else None
        idx = out.argmax(axis=2)
        conf = np.take_along_axis(out, idx[..., None], axis=2)[..., 0]
        return idx, conf, out[:, :, self.space_index] if self.space_index is not None else None

    def __call__(self, probs: np.ndarray | tuple) -> list[tuple[str, float]]:
        """probs: BxTxC softmax output (or its ``head``) -> (text, mean confidence of the kept
        characters)."""
        idx, conf, _ = self.head(probs)
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

    def decode_steps(self, probs: np.ndarray | tuple, content_widths: list[int] | np.ndarray,
                     batch_width: int) -> list[CharSteps]:
        """``__call__`` plus character steps: ``content_widths`` are the crops' widths in network
        pixels before right-padding to ``batch_width`` (``RecPreprocessor.target_width``)."""
        idx, conf, space = self.head(probs)
        T = idx.shape[1]
        cs = np.minimum(np.asarray(content_widths, np.float64), batch_width) * T / batch_width
        return self.collapse_steps(idx, conf, space, cs)

    def collapse_steps(self, idx: np.ndarray, conf: np.ndarray, space_prob: np.ndarray | None = None,
                       content_steps: np.ndarray | None = None) -> list[CharSteps]:
        """Like ``collapse``, plus where each kept character sits in the CTC output.

        ``space_prob`` (BxT, the probability of the space class at every step) is optional; with
        it, each pair of neighbouring characters also gets the largest space probability seen
        between them (a space the argmax did not pick still leaves a trace there).
        ``content_steps[b]`` is how many steps cover crop b itself (the rest is padding);
        default T.
        """
        B, T = idx.shape
        texts = self.collapse(idx, conf)
        keep = idx != 0
        keep[:, 1:] &= idx[:, 1:] != idx[:, :-1]
        keep &= idx < len(self.characters)
        # last step of the run each step belongs to: the next step where the class changes
        last = np.ones((B, T), bool)
        last[:, :-1] = idx[:, 1:] != idx[:, :-1]
        pos = np.where(last, np.arange(T), T)
        run_end = np.minimum.accumulate(pos[:, ::-1], axis=1)[:, ::-1]
        # every kept character of the batch at once (row-major: by line, then step), then cut
        # per line; a per-line loop of small numpy calls cost ~45 us a line on the GPU driver
        rows, starts = np.nonzero(keep)
        starts = starts.astype(np.int32)
        ends = run_end[rows, starts].astype(np.int32)
        confs = conf[rows, starts].astype(np.float32)
        off = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
        gaps = None
        if space_prob is not None and len(starts) > 1:
            # pairs of neighbours in the flattened batch; those across two lines are never used
            flat = rows.astype(np.int64) * T
            gaps = _gap_max(np.ascontiguousarray(space_prob, np.float32).ravel(),
                            flat[:-1] + ends[:-1], flat[1:] + starts[1:])
        out = []
        for b, (text, score) in enumerate(texts):
            o0, o1 = int(off[b]), int(off[b + 1])
            if space_prob is None:
                gap = None
            elif gaps is None or o1 - o0 < 2:
                gap = np.zeros(0, np.float32)
            else:
                gap = gaps[o0 : o1 - 1]
            cs = float(T if content_steps is None else content_steps[b])
            out.append(CharSteps(text, score, starts[o0:o1], ends[o0:o1], confs[o0:o1], T, cs, gap))
        return out


def _gap_max(p: np.ndarray, after: np.ndarray, before: np.ndarray) -> np.ndarray:
    """max(p[a+1 : b]) for every pair (a, b); 0 where the range is empty."""
    out = np.zeros(len(after), np.float32)
    k = np.flatnonzero(before > after + 1)
    if len(k):
        # the ranges are disjoint and increasing: one reduceat over [start, end) pairs
        bounds = np.stack([after[k] + 1, before[k]], 1).ravel()
        out[k] = np.maximum.reduceat(np.append(p, 0.0), bounds)[::2]
    return out


@dataclass
class CharSteps:
    """A decoded line with the CTC time steps of its characters.

    ``start[k]``/``end[k]`` are the first and last step (inclusive) of the argmax run that gave
    character ``text[k]``, ``conf[k]`` its probability. ``steps`` is T, the steps the network
    produced for the padded batch width; ``content_steps`` of them cover the crop itself (T * crop
    width / batch width, both in network pixels), so step t lies at (t + 0.5) / content_steps of
    the crop's width.
    ``gap_space[k]`` (optional) is the largest space-class probability between characters k
    and k+1.
    """

    text: str
    score: float
    start: np.ndarray
    end: np.ndarray
    conf: np.ndarray
    steps: int
    content_steps: float
    gap_space: np.ndarray | None = None
