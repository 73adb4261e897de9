"""Native PyTorch networks (models/torch_*.py) for the roles a model set supports."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ocrforge.models.registry import ModelSet

if TYPE_CHECKING:
    import torch.nn as nn


class NoNativeNetwork(ValueError):
    """The model set has no native torch network for that role."""


def build_native(ms: ModelSet, role: str, path: str | Path) -> nn.Module:
    """The native network of ``role`` in model set ``ms``, weights imported from its ONNX file."""
    if role == "page_orientation":  # one network for every set (a plain classifier graph)
        from ocrforge.models.torch_graph import graph_from_onnx

        return graph_from_onnx(path)
    if role not in ms.native:
        have = ", ".join(ms.native) or "none"
        raise NoNativeNetwork(
            f"model set {ms.name!r} has no native PyTorch {role} network (native roles: {have}); "
            "use runtime onnxruntime, or model set ppocrv6-small with runtime torch")
    if role == "det":
        from ocrforge.models.torch_det import det_from_onnx

        return det_from_onnx(path)
    if role == "rec":
        from ocrforge.models.torch_rec import rec_from_onnx

        return rec_from_onnx(path)
    if role == "cls":
        from ocrforge.models.torch_cls import cls_from_onnx

        return cls_from_onnx(path)
    raise NoNativeNetwork(f"unknown network role {role!r} (det, rec or cls)")
