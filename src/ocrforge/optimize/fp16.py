"""FP16 conversion for GPU execution providers (CUDA, TensorRT, DirectML, CoreML).

Inputs and outputs stay float32 (the engine feeds float32 and decodes float32); ops that
lose accuracy or overflow in half precision stay float32 with a Cast around them. On the
CPU provider FP16 runs slower than FP32 (casts, no fp16 kernels for most ops): see
docs/BENCHMARKS.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx

# normalisation statistics (ReduceMean/Pow/Sqrt of LayerNorm), exponentials and the final
# softmax over ~18k classes are where fp16 loses digits or overflows
SENSITIVE_OPS = ("Softmax", "ReduceMean", "Pow", "Sqrt", "Exp", "Log", "Erf",
                 "LayerNormalization", "Resize", "TopK", "NonMaxSuppression")


def convert_fp16(src: str | Path, dst: str | Path, *, block_ops: Sequence[str] = SENSITIVE_OPS,
                 block_nodes: Sequence[str] = ()) -> Path:
    from onnxconverter_common import float16

    model = onnx.load(str(src))
    op_block = list(float16.DEFAULT_OP_BLOCK_LIST) + [o for o in block_ops if o not in float16.DEFAULT_OP_BLOCK_LIST]
    try:
        out = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=op_block,
                                               node_block_list=list(block_nodes) or None)
    except ValueError:
        # onnxconverter-common 1.14-1.16 fails ("downstream node of the second cast node should
        # be graph output") when a blocked op writes a graph output (rec's final Softmax): let
        # those ops run in fp16; keep_io_types still casts the output back to float32
        model = onnx.load(str(src))
        outs = {o.name for o in model.graph.output}
        at_out = {n.op_type for n in model.graph.node if set(n.output) & outs}
        out = float16.convert_float_to_float16(model, keep_io_types=True,
                                               op_block_list=[o for o in op_block if o not in at_out],
                                               node_block_list=list(block_nodes) or None)
    onnx.save(out, str(dst))
    return Path(dst)
