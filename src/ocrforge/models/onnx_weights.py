"""Read the learned tensors of a PP-OCR ONNX graph in node order, typed by the op that uses them.

The native PyTorch networks (torch_det / torch_rec / torch_cls) list their parameterised
layers in the same order as the ONNX graph computes them; ``load_into`` pairs the two lists
and checks every shape, so a wrong architecture fails loudly instead of loading silently.

Only patterns seen in the shipped graphs are recognised:
- Conv / ConvTranspose, with the bias either as input 2 or as the single following
  ``Add(conv_out, const[1, C, 1, 1])`` (Paddle2ONNX emits the latter for some models);
- BatchNormalization (scale, bias, mean, var, epsilon);
- MatMul(x, const[K, N]) followed by ``Add(., const[N])`` -> a Linear layer;
- the expanded LayerNorm ``(x - mean) / sqrt(var + eps) * gamma + beta``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class Entry:
    kind: str  # conv | convT | bn | linear | ln
    tensors: list[np.ndarray]
    attrs: dict = field(default_factory=dict)
    node: str = ""

    def describe(self) -> str:
        shapes = ", ".join(str(tuple(t.shape)) for t in self.tensors)
        return f"{self.kind}[{shapes}] at node {self.node!r}"


def _attrs(node) -> dict:
    import onnx

    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def read_entries(path: str | Path) -> list[Entry]:
    """The parameter entries of an ONNX model in graph (topological) order."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    g = model.graph
    consts: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    alias: dict[str, str] = {}
    for n in g.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        elif n.op_type == "Identity":
            alias[n.output[0]] = n.input[0]

    def r(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    nodes = [n for n in g.node if n.op_type not in ("Constant", "Identity")]
    consumers: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(r(i), []).append(n)

    def const(name: str) -> np.ndarray | None:
        return consts.get(r(name))

    def follow_add(out: str, shape_ok) -> np.ndarray | None:
        """The constant of the single Add consuming `out`, if it has the expected shape."""
        cs = consumers.get(out, [])
        if len(cs) != 1 or cs[0].op_type != "Add":
            return None
        other = [i for i in cs[0].input if r(i) != out]
        if len(other) != 1:
            return None
        c = const(other[0])
        return c if c is not None and shape_ok(c) else None

    entries: list[Entry] = []
    eps_pending: float | None = None
    for n in nodes:
        op = n.op_type
        if op in ("Conv", "ConvTranspose"):
            w = const(n.input[1])
            if w is None:
                raise ValueError(f"{path}: {op} {n.name} has a non-constant weight")
            b = const(n.input[2]) if len(n.input) > 2 and n.input[2] else None
            if b is None:
                c_out = w.shape[0] if op == "Conv" else w.shape[1] * _attrs(n).get("group", 1)
                fb = follow_add(r(n.output[0]), lambda c, co=c_out: c.shape == (1, co, 1, 1))
                if fb is not None:
                    b = fb.reshape(-1)
            ts = [w] if b is None else [w, b]
            entries.append(Entry("conv" if op == "Conv" else "convT", ts, _attrs(n), n.name))
        elif op == "BatchNormalization":
            ts = [const(i) for i in n.input[1:5]]
            entries.append(Entry("bn", ts, _attrs(n), n.name))
        elif op == "MatMul":
            w = const(n.input[1])
            if w is None:
                continue  # activation x activation (attention)
            b = follow_add(r(n.output[0]), lambda c, k=w.shape[1]: c.shape == (k,))
            ts = [w.T.copy()] if b is None else [w.T.copy(), b]
            entries.append(Entry("linear", ts, {}, n.name))
        elif op == "Sqrt":
            # Sqrt(Add(ReduceMean(.), eps)) of the expanded LayerNorm
            prod = [m for m in nodes if r(n.input[0]) in (r(o) for o in m.output)]
            if prod and prod[0].op_type == "Add":
                for i in prod[0].input:
                    c = const(i)
                    if c is not None and c.size == 1:
                        eps_pending = float(c.reshape(-1)[0])
        elif op == "Mul" and eps_pending is not None:
            gamma = next((const(i) for i in n.input if const(i) is not None and const(i).ndim == 1), None)
            if gamma is None:
                continue
            beta = follow_add(r(n.output[0]), lambda c, k=gamma.shape[0]: c.shape == (k,))
            if beta is None:
                continue
            entries.append(Entry("ln", [gamma, beta], {"epsilon": eps_pending}, n.name))
            eps_pending = None
    return entries


def ordered_layers(module) -> list:
    """Parameterised layers of a module in registration order (the networks register them in
    the order the ONNX graph runs them)."""
    import torch.nn as nn

    kinds = (nn.Conv2d, nn.ConvTranspose2d, nn.BatchNorm2d, nn.Linear, nn.LayerNorm)
    return [m for m in module.modules() if isinstance(m, kinds)]


def load_into(module, path: str | Path, layers: list | None = None) -> None:
    """Copy the ONNX tensors into the module's layers; raise on any kind or shape mismatch."""
    import torch
    import torch.nn as nn

    entries = read_entries(path)
    layers = ordered_layers(module) if layers is None else layers
    if len(entries) != len(layers):
        raise ValueError(
            f"{path}: the ONNX graph has {len(entries)} parameterised layers, "
            f"the PyTorch network {len(layers)}: architecture mismatch"
        )
    want = {nn.Conv2d: "conv", nn.ConvTranspose2d: "convT", nn.BatchNorm2d: "bn",
            nn.Linear: "linear", nn.LayerNorm: "ln"}

    def put(p: torch.Tensor | None, t: np.ndarray | None, what: str) -> None:
        if (p is None) != (t is None):
            raise ValueError(f"{what}: bias present on one side only")
        if p is None:
            return
        if tuple(p.shape) != tuple(t.shape):
            raise ValueError(f"{what}: shape {tuple(p.shape)} != ONNX {tuple(t.shape)}")
        with torch.no_grad():
            p.copy_(torch.from_numpy(np.array(t, dtype=np.float32, copy=True)).to(p.dtype))

    for k, (layer, e) in enumerate(zip(layers, entries, strict=True)):
        kind = want[type(layer)]
        what = f"layer {k} ({type(layer).__name__}) <- {e.describe()}"
        if kind != e.kind:
            raise ValueError(f"{what}: kind mismatch")
        if kind in ("conv", "convT"):
            put(layer.weight, e.tensors[0], what)
            put(layer.bias, e.tensors[1] if len(e.tensors) > 1 else None, what)
            a = e.attrs
            if list(layer.stride) != list(a.get("strides", [1, 1])):
                raise ValueError(f"{what}: stride {layer.stride} != {a.get('strides')}")
            if layer.groups != a.get("group", 1):
                raise ValueError(f"{what}: groups {layer.groups} != {a.get('group')}")
            pads = a.get("pads")
            if pads is not None and list(layer.padding) != [pads[0], pads[1]]:
                raise ValueError(f"{what}: padding {layer.padding} != {pads}")
        elif kind == "bn":
            scale, bias, mean, var = e.tensors
            put(layer.weight, scale, what)
            put(layer.bias, bias, what)
            put(layer.running_mean, mean, what)
            put(layer.running_var, var, what)
            layer.eps = float(e.attrs.get("epsilon", 1e-5))
        elif kind == "linear":
            put(layer.weight, e.tensors[0], what)
            put(layer.bias, e.tensors[1] if len(e.tensors) > 1 else None, what)
        elif kind == "ln":
            put(layer.weight, e.tensors[0], what)
            put(layer.bias, e.tensors[1], what)
            layer.eps = float(e.attrs["epsilon"])
