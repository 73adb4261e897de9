"""PyTorch runtime: one nn.Module on one device with FP32/FP16/BF16, channels_last,
torch.compile (inductor; static shapes, or symbolic ones on request) and CUDA graph capture
per input shape.

It knows nothing about OCR: the module it runs (a native network from models/) is handed in.
A module may name submodules that must stay FP32 in low precision (``keep_fp32``, e.g. the
recognition head whose logits feed a softmax); their inputs are cast up automatically. Those it
also names in ``fp16_safe`` (measured to read the same in FP16) stay FP32 only under BF16.

``run(np.float32 NCHW) -> np.float32`` is the Runtime contract (the CPU engine uses it, on the
CPU too); ``forward(tensor)`` is the device-side entry of the GPU scheduler (no host round trip).

Settings (RuntimeConfig): device, torch_precision, compile, cuda_graphs. Environment:
OCRFORGE_TORCH_COMPILE_MODE (default "default"; e.g. "max-autotune-no-cudagraphs"),
OCRFORGE_TORCH_COMPILE_DYNAMIC=1 (one compilation whose batch and spatial sizes are symbolic,
instead of one per input shape),
OCRFORGE_CUDA_GRAPHS_MAX (graphs kept per network, default 64), OCRFORGE_CAPTURE_WARMUPS (eager
runs on the capture stream before a capture, default 2), OCRFORGE_CUDNN_BENCHMARK=1
(cuDNN autotuning per shape; slower start), OCRFORGE_TORCH_DEPTHWISE=native (depthwise
convolutions by PyTorch's kernel, not cuDNN: torch_depthwise.py; "first_use": in eager calls
only, CUDA graphs capture cuDNN's), OCRFORGE_TORCH_FP16_SAFE=0
(keep every keep_fp32 submodule in FP32 under FP16 too), OCRFORGE_TORCH_POINTWISE=0 (keep 1x1
convolutions as cuDNN convolutions on CUDA, not GEMMs with the bias inside: torch_pointwise.py),
OCRFORGE_TORCH_FUSE=0 (on CUDA, keep biases, gates and GELUs in passes of their own instead of
folding them into the GEMMs and multiply-adds around them: torch_pointwise.fuse_*),
OCRFORGE_TORCH_FUSE_SKIP (class names whose ``fuse()`` is not called, e.g. "DetNeck,Stem") and
TORCHINDUCTOR_CACHE_DIR (default: <ocrforge cache>/inductor, so a second start reuses compiled kernels).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter, OrderedDict
from functools import partial
from typing import Any

import numpy as np

from ocrforge.config import RuntimeConfig
from ocrforge.paths import cache_dir


def _set_compile_cache() -> None:
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir() / "inductor"))
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")


_set_compile_cache()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from ocrforge.runtimes.torch_capture import BackgroundCapture  # noqa: E402
from ocrforge.runtimes.torch_depthwise import cudnn_here, depthwise_native  # noqa: E402
from ocrforge.runtimes.torch_pointwise import (  # noqa: E402
    fold_biases,
    fuse_activations,
    fuse_modules,
    pointwise_as_linear,
)

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def resolve_device(name: str) -> torch.device:
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device {name!r} asked for, but this PyTorch ({torch.__version__}) sees no CUDA GPU; "
            "use --device cpu or install a CUDA build of PyTorch"
        )
    return dev


def _cast_input_fp32(_mod: nn.Module, args: tuple) -> tuple:
    return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


def _kept_fp32(net: nn.Module, dtype: torch.dtype) -> tuple[str, ...]:
    """The submodules of ``net`` that run in FP32 under ``dtype``."""
    keep = tuple(getattr(net, "keep_fp32", ()))
    if dtype == torch.float16 and os.environ.get("OCRFORGE_TORCH_FP16_SAFE", "1") == "1":
        keep = tuple(k for k in keep if k not in getattr(net, "fp16_safe", ()))
    return keep


class _Float32Out(nn.Module):
    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> Any:
        out = self.net(x)
        return out.float() if torch.is_tensor(out) else out


class _Then:
    """The network, then ``post(output, input)``: one callable to run or capture."""

    def __init__(self, fn: Any, post: Any):
        self.fn, self.post = fn, post

    def __call__(self, x: torch.Tensor) -> Any:
        return self.post(self.fn(x), x)


class GraphShare:
    """Where a runtime's CUDA graphs are captured: the graph memory pool, the capture stream
    and the lock that keeps one capture at a time on it. Each runtime has its own, unless the
    engine hands one runtime's to the others (runtime.shared_graph_pool): then all of them are
    shared, the stream too (the caching allocator gives a freed block again only to the stream
    that freed it, so one pool with a stream per runtime would reuse nothing across them)."""

    def __init__(self, dev: torch.device):
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(dev)
        self.lock = threading.Lock()


class TorchRuntime:
    """One network on one device. Thread-safe for run() (one call at a time per runtime)."""

    def __init__(self, module: nn.Module, cfg: RuntimeConfig, *, name: str = "",
                 share: GraphShare | None = None):
        self.label = name
        self.precision = cfg.torch_precision
        self.dtype = DTYPES[cfg.torch_precision]
        self.dev = resolve_device(cfg.device)
        self.device = str(self.dev)
        self.cuda = self.dev.type == "cuda"
        self.use_graphs = bool(cfg.cuda_graphs) and self.cuda
        self.compiled = bool(cfg.compile)
        self.dynamic = self.compiled and os.environ.get("OCRFORGE_TORCH_COMPILE_DYNAMIC") == "1"
        if self.dynamic and not getattr(module, "symbolic_compile", True):
            self.compiled = self.dynamic = False
        mode = os.environ.get("OCRFORGE_TORCH_COMPILE_MODE", "default")
        self.name = (self.label + ":" if self.label else "") + "torch[" + ",".join(
            [self.device, self.precision]
            + (["compile:" + mode] if self.compiled else [])
            + (["cudagraphs"] if self.use_graphs else [])
        ) + "]"
        if self.cuda:
            # cuDNN autotuning per input shape: opt-in, since every new bucket shape then costs
            # an autotuning pass at start (not cached across processes)
            if os.environ.get("OCRFORGE_CUDNN_BENCHMARK", "0") == "1":
                torch.backends.cudnn.benchmark = True
            if self.precision == "fp32":
                # a true FP32 reference: no TF32 in cuDNN convolutions or cuBLAS (process-wide)
                torch.backends.cudnn.allow_tf32 = False
                torch.backends.cuda.matmul.allow_tf32 = False
        t0 = time.perf_counter()
        self.net = module.eval()
        self.pointwise = 0
        self.fused = 0
        fuse = self.cuda and os.environ.get("OCRFORGE_TORCH_FUSE", "1") == "1"
        if fuse:
            skip = os.environ.get("OCRFORGE_TORCH_FUSE_SKIP", "")
            self.fused = fuse_modules(self.net, frozenset(filter(None, skip.split(","))))
        if self.cuda and os.environ.get("OCRFORGE_TORCH_POINTWISE", "1") == "1":
            fold_biases(self.net)
            self.pointwise = pointwise_as_linear(self.net, _kept_fp32(self.net, self.dtype))
            if fuse and self.precision != "fp32":  # FP32 stays the reference: erf GELU
                self.fused += fuse_activations(self.net)
        self.depthwise = 0
        dw = os.environ.get("OCRFORGE_TORCH_DEPTHWISE", "cudnn")
        if self.cuda and dw in ("native", "first_use"):
            self.depthwise = depthwise_native(self.net, first_use=dw == "first_use")
        self.module = _Float32Out(self.net).to(self.dev, self.dtype).eval()
        if self.dtype != torch.float32:
            for sub in _kept_fp32(self.net, self.dtype):
                m = self.net.get_submodule(sub)
                m.float()
                m.register_forward_pre_hook(_cast_input_fp32)
        if self.cuda:
            self.module = self.module.to(memory_format=torch.channels_last)
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.fn = self.module
        if self.compiled:
            import torch._dynamo as dynamo

            # static shapes: one specialisation per shape bucket, kept side by side; dynamic:
            # batch and spatial sizes symbolic (marked per call), so new buckets reuse the code
            dynamo.config.cache_size_limit = max(dynamo.config.cache_size_limit, 64)
            self.fn = torch.compile(self.module, mode=None if mode == "default" else mode,
                                    dynamic=None if self.dynamic else False, fullgraph=True)
        # what a post runs after: the network itself (compiled: the float32-out module, and
        # posts with ``through`` get no eager network to run piecewise)
        self._for_post = self.fn if self.compiled else self.net
        self.load_s = time.perf_counter() - t0
        self._graphs: OrderedDict[tuple, tuple] = OrderedDict()
        # a shape is captured after capture_after eager uses (by default on its second: the
        # first warms cuDNN and the allocator, so an engine serves its first page uncaptured)
        self.capture_after = cfg.capture_after
        # warm-up runs before each capture (cuDNN/cuBLAS choices, allocations)
        self.capture_warmups = int(os.environ.get("OCRFORGE_CAPTURE_WARMUPS", "2"))
        self.capture_mode = "thread_local"  # see _capture
        # OCRFORGE_CAPTURE_WARM_STREAM=capture: warm-ups on the capture stream (as before
        # 2026-12-06; see _capture)
        self._warm_on_caller = os.environ.get("OCRFORGE_CAPTURE_WARM_STREAM") != "capture"
        self._seen: dict[tuple, int] = {}
        # capture_s = warm_s (the warm-up runs) + graph_s (capture and instantiation): host time
        self.counts = {"eager": 0, "captures": 0, "replays": 0, "capture_s": 0.0,
                       "warm_s": 0.0, "graph_s": 0.0}
        self.uses: Counter = Counter()  # CUDA-graph path: calls per input shape (what captures pay)
        self._max_graphs = int(os.environ.get("OCRFORGE_CUDA_GRAPHS_MAX", "64"))
        # another runtime's (runtime.shared_graph_pool, passed by the engine), else its own
        self.graph_share = share or (GraphShare(self.dev) if self.use_graphs else None)
        self._copy_stream = torch.cuda.Stream(self.dev) if self.cuda else None
        # one stream for every capture's warm-up and capture (as torch.cuda.graph's default
        # capture stream): the caching allocator keeps freed blocks per stream, so warm-ups on a
        # new stream each time (from a pool of 32) could not reuse each other's activations:
        # likely why an engine held ~100 GB reserved for ~6 GB allocated on the H200 (not yet
        # re-measured with this stream; test_gpu_captures_reuse_their_warm_up_memory)
        g = self.graph_share
        self._pool = g.pool if g is not None else None
        self._capture_stream = g.stream if g is not None else None
        self._capture_lock = g.lock if g is not None else threading.Lock()
        # new shapes captured by a worker thread while the caller runs them eagerly
        # (torch_capture.py); not with torch.compile, whose tracing is not thread-safe
        self.background = (BackgroundCapture(self._capture_into, self.dev)
                           if self.use_graphs and cfg.capture_in_background and not self.compiled
                           else None)
        self._pinned: dict[tuple, torch.Tensor] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ device side
    def _prepare(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dev, self.dtype, non_blocking=True)
        x = x.contiguous(memory_format=torch.channels_last) if self.cuda else x
        return self._mark_dynamic(x)

    def _mark_dynamic(self, x: torch.Tensor) -> torch.Tensor:
        if self.dynamic:
            import torch._dynamo as dynamo

            # size-1 dimensions stay specialised (dynamo's 0/1 rule): batch 1 compiles apart
            for d in (0, 2, 3):
                if x.shape[d] > 1:
                    dynamo.mark_dynamic(x, d)
        return x

    def _then(self, post: Any) -> Any:
        """The callable that runs the network and ``post``: a post with ``through(net, x)``
        runs the (eager) network itself, to reduce its output piecewise."""
        if hasattr(post, "through") and not self.compiled:
            return partial(post.through, self.net)
        return _Then(self._for_post, post)

    @torch.inference_mode()
    def forward(self, x: torch.Tensor, post: Any = None) -> Any:
        """Device tensor in (any float dtype), float32 device tensor out. ``post(out, x)``, when
        given, runs on the network's output (and its input) inside the same CUDA graph and its
        result is returned instead: a large output reduced on the device (a per-step argmax of
        recognition's thousands of classes) then never stays in the graph's memory. With
        cuda_graphs the result is the graph's static output: consume (or copy) it before the
        next call. ``post`` must be the same object from call to call (it is part of the key);
        it gets the network's output in the network's own precision (no float32 pass over a
        large FP16 output first) and types its result itself."""
        x = self._prepare(x)
        fn = self.fn if post is None else self._then(post)
        if not self.use_graphs:
            return fn(x)
        key = (tuple(x.shape), x.dtype, post)
        self.uses[key[0]] += 1  # bucketed shapes only: a few hundred at most
        g = self._graphs.get(key) or self._graph_for(key, x, fn)
        if g is None:
            self.counts["eager"] += 1
            return fn(x)
        self.counts["replays"] += 1
        graph, static_in, static_out = g
        static_in.copy_(x)
        graph.replay()
        return static_out

    def _graph_for(self, key: tuple, x: torch.Tensor, fn: Any, now: bool = False) -> tuple | None:
        """The graph for a shape not captured yet: captured here (``now``, or no background
        worker), requested from the worker (None meanwhile), or None (first use, or full)."""
        seen = self._seen[key] = self._seen.get(key, 0) + 1
        if len(self._graphs) >= self._max_graphs or seen <= self.capture_after:
            return None
        if self.background is not None and not now:
            self.background.request(key, x, fn)
            return None
        self._capture_into(key, x, fn)
        return self._graphs.get(key)

    def _capture_into(self, key: tuple, x: torch.Tensor, fn: Any) -> None:
        with self._capture_lock:
            if key in self._graphs or len(self._graphs) >= self._max_graphs:
                return
            t0 = time.perf_counter()
            g = self._capture(x, fn)
            self.counts["captures"] += 1
            self.counts["capture_s"] += time.perf_counter() - t0
            self._graphs[key] = g

    def wait_captures(self, timeout: float | None = None) -> bool:
        """Block until the background captures asked for so far are installed."""
        return self.background is None or self.background.wait(timeout)

    def _capture(self, x: torch.Tensor, fn: Any) -> tuple:
        static_in = self._mark_dynamic(x.clone())
        s = self._capture_stream
        s.wait_stream(torch.cuda.current_stream(self.dev))
        t0 = time.perf_counter()
        # Warm-ups on the capturing thread's current stream (the default stream, where the
        # driver's eager runs are), not on the capture stream: the caching allocator keeps
        # freed blocks per stream, so warm-ups on the capture stream left each runtime a cache
        # of its own as large as its largest warm-up (rec 6.1, orientation 2.0, det 1.1 GiB)
        # that only later warm-ups could reuse. Here they reuse the eager runs' blocks: 17.4
        # against 26.6 GiB reserved, same rate and reading (H100, 2026-12-06, BENCHMARKS.md)
        warm = torch.cuda.current_stream(self.dev) if self._warm_on_caller else s
        with torch.cuda.stream(warm), cudnn_here():
            for _ in range(self.capture_warmups):  # compilation, cuDNN/cuBLAS choices, memory
                fn(static_in)
        s.wait_stream(warm)
        torch.cuda.current_stream(self.dev).wait_stream(s)
        t1 = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        # Not torch.cuda.graph(): on entry it synchronises the device and empties both the
        # device cache and the pinned host cache, so every capture in a running engine made the
        # next allocations cudaMalloc / cudaHostAlloc again (each synchronising), and cost
        # 0.4-1.5 s (H200, 2026-12-04). The graph's memory comes from its own pool either way.
        # thread_local: the scheduler's decoder threads pin host memory (cudaHostAlloc) while
        # the driver thread captures; in the default global mode that invalidates the capture
        # (cuDNN EXECUTION_FAILED, then cudaErrorStreamCaptureInvalidated, measured on the H200)
        with torch.cuda.stream(s), cudnn_here():
            graph.capture_begin(pool=self._pool, capture_error_mode=self.capture_mode)
            try:
                static_out = fn(static_in)
            finally:
                graph.capture_end()
        self.counts["warm_s"] += t1 - t0
        self.counts["graph_s"] += time.perf_counter() - t1
        return graph, static_in, static_out

    def warmup(self, shapes: list[tuple[int, ...]], post: Any = None) -> float:
        """Compile / capture the given input shapes (with ``post``, as forward) now, on this
        thread; returns seconds spent."""
        t0 = time.perf_counter()
        fn = self.fn if post is None else self._then(post)
        for shp in shapes:
            x = self._prepare(torch.zeros(shp, device=self.dev, dtype=self.dtype))
            key = (tuple(x.shape), x.dtype, post)
            if not self.use_graphs:
                fn(x)
            elif key not in self._graphs:
                self._seen[key] = max(self._seen.get(key, 0), self.capture_after)
                self._graph_for(key, x, fn, now=True)
        if self.cuda:
            torch.cuda.synchronize(self.dev)
        return time.perf_counter() - t0

    def needs_graph(self, shape: tuple[int, ...], post: Any = None, share: float = 0.5) -> bool:
        """Whether capturing this input shape (with ``post``) now would add a graph: graphs on,
        none for it yet, and at most ``share`` of the graph budget used (an idle capture's
        guess leaves half of it for shapes that pages actually bring)."""
        return (self.use_graphs and (tuple(shape), self.dtype, post) not in self._graphs
                and len(self._graphs) < self._max_graphs * share)

    # ------------------------------------------------------------------ Runtime contract
    def _pad_batch(self, n: int) -> int:
        """With graphs or compile, batches are padded to a power of two so captured graphs and
        compiled specialisations are reused (padding the batch never changes other rows)."""
        if not (self.use_graphs or self.compiled):
            return n
        return 1 << (n - 1).bit_length()

    @torch.inference_mode()
    def run(self, batch: np.ndarray) -> np.ndarray:
        if batch.ndim != 4 or batch.shape[1] != 3:
            raise ValueError(f"{self.name}: expected an N x 3 x H x W batch, got {batch.shape}")
        if not self.cuda:
            with self._lock:
                return self._run_cpu(batch)
        with self._lock, torch.cuda.device(self.dev):
            return self._run_cuda(batch)

    def _run_cpu(self, batch: np.ndarray) -> np.ndarray:
        n = batch.shape[0]
        x = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32))
        npad = self._pad_batch(n)
        if npad != n:
            x = torch.cat([x, x.new_zeros((npad - n, *x.shape[1:]))])
        return self.forward(x)[:n].float().numpy()

    def _run_cuda(self, batch: np.ndarray) -> np.ndarray:
        n = batch.shape[0]
        npad = self._pad_batch(n)
        shape = (npad, *batch.shape[1:])
        host = self._pinned.get(shape)
        if host is None:
            host = self._pinned[shape] = torch.zeros(shape, dtype=torch.float32).pin_memory()
        hv = host.numpy()
        hv[:n] = batch
        if npad != n:
            hv[n:] = 0.0
        main = torch.cuda.current_stream(self.dev)
        with torch.cuda.stream(self._copy_stream):
            xd = host.to(self.dev, non_blocking=True)
        main.wait_stream(self._copy_stream)
        xd.record_stream(main)
        return self.forward(xd)[:n].to("cpu", non_blocking=False).numpy()
