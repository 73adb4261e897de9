"""A TrueType font with no visible glyphs, built in code, for invisible PDF text layers.

Every character code maps to one empty glyph that is half an em wide; the real text comes from
the PDF's ToUnicode map, so any script (CJK included) selects, searches and copies without
embedding a large font. This is the idea behind Tesseract's GlyphLessFont; this font is built
from the OpenType spec here, not copied.
"""

from __future__ import annotations

import struct
from functools import cache

UNITS_PER_EM = 1000
ADVANCE = 500  # every glyph: half an em
NAME = "OcrforgeGlyphless"
CREATED = 3786825600  # 2024-01-01 in seconds since 1904 (fixed: the output stays reproducible)


def _checksum(data: bytes) -> int:
    data += b"\0" * (-len(data) % 4)
    return sum(struct.unpack(f">{len(data) // 4}I", data)) & 0xFFFFFFFF


def _name_table() -> bytes:
    strings = [(1, NAME), (2, "Regular"), (3, f"{NAME}-Regular"), (4, NAME), (5, "Version 1.0"),
               (6, NAME)]
    records, blob = [], b""
    for name_id, text in strings:
        raw = text.encode("utf-16-be")
        records.append(struct.pack(">HHHHHH", 3, 1, 0x409, name_id, len(raw), len(blob)))
        blob += raw
    header = struct.pack(">HHH", 0, len(strings), 6 + 12 * len(strings))
    return header + b"".join(records) + blob


def _cmap_table() -> bytes:
    """Windows Unicode BMP cmap (format 4): U+0020 -> glyph 1, plus the closing segment."""
    seg_count = 2
    sub = struct.pack(">HHHHHHH", 4, 32, 0, seg_count * 2, 4, 1, 0)
    sub += struct.pack(">HH", 0x0020, 0xFFFF)  # endCode
    sub += struct.pack(">H", 0)  # reservedPad
    sub += struct.pack(">HH", 0x0020, 0xFFFF)  # startCode
    sub += struct.pack(">hh", 1 - 0x0020, 1)  # idDelta
    sub += struct.pack(">HH", 0, 0)  # idRangeOffset
    return struct.pack(">HHHHI", 0, 1, 3, 1, 12) + sub


# Glyph 1 draws nothing but has a box: two one-point contours, at (0, 0) and at
# (ADVANCE, UNITS_PER_EM). Rasterizers ignore one-point contours; text extractors (pdfium
# drops characters whose glyph box is empty) see each character's box where it stands.
_GLYPH = (
    struct.pack(">hhhhh", 2, 0, 0, ADVANCE, UNITS_PER_EM)  # contours, xMin, yMin, xMax, yMax
    + struct.pack(">HHH", 0, 1, 0)  # last point of each contour, no instructions
    + bytes([0x01, 0x01])  # flags: on curve, 2-byte coordinates
    + struct.pack(">hh", 0, ADVANCE)  # x deltas
    + struct.pack(">hh", 0, UNITS_PER_EM)  # y deltas
)


@cache
def glyphless_ttf() -> bytes:
    """The font file (under 800 bytes): an empty .notdef and glyph 1, both ADVANCE wide."""
    num_glyphs = 2
    tables = {
        "head": struct.pack(">IIIIHHqqhhhhHHhhh", 0x00010000, 0x00010000, 0, 0x5F0F3CF5, 0x000B,
                            UNITS_PER_EM, CREATED, CREATED, 0, 0, ADVANCE, UNITS_PER_EM, 0, 3, 2, 0, 0),
        "hhea": struct.pack(">IhhhHhhhhhhhhhhhH", 0x00010000, UNITS_PER_EM, 0, 0, ADVANCE, 0, 0,
                            0, 1, 0, 0, 0, 0, 0, 0, 0, num_glyphs),
        "maxp": struct.pack(">IHHHHHHHHHHHHHH", 0x00010000, num_glyphs, 2, 2, 0, 0, 2, 0, 0, 0,
                            0, 0, 0, 0, 0),
        "hmtx": struct.pack(">HhHh", ADVANCE, 0, ADVANCE, 0),
        "loca": struct.pack(">HHH", 0, 0, (len(_GLYPH) + 1) // 2),  # short offsets (halved)
        "glyf": _GLYPH + b"\0" * (len(_GLYPH) % 2),
        "cmap": _cmap_table(),
        "name": _name_table(),
        "post": struct.pack(">IihhIIIII", 0x00030000, 0, -100, 50, 1, 0, 0, 0, 0),
        "OS/2": struct.pack(
            ">HhHHHhhhhhhhhhhh10sIIII4sHHHhhhHHIIhhHHH",
            4, ADVANCE, 400, 5, 0,  # version, xAvgCharWidth, weight, width class, fsType (installable)
            650, 600, 0, 75, 650, 600, 0, 350, 50, 250, 0,  # sub/superscript, strikeout, family class
            b"\0" * 10, 0, 0, 0, 0, b"OCRF",  # panose, unicode ranges, vendor
            0x40, 0x20, 0x20,  # fsSelection REGULAR, first/last char index
            UNITS_PER_EM, 0, 0, UNITS_PER_EM, 0,  # typo ascender/descender/gap, win ascent/descent
            1, 0, 500, 700, 0, 0x20, 1,  # code page ranges, x height, cap height, default/break char, context
        ),
    }
    tags = sorted(tables)
    n = len(tags)
    entry_selector = n.bit_length() - 1
    search_range = 16 * (1 << entry_selector)
    header = struct.pack(">IHHHH", 0x00010000, n, search_range, entry_selector, n * 16 - search_range)
    offset = len(header) + 16 * n
    directory, body = b"", b""
    for tag in tags:
        data = tables[tag]
        directory += struct.pack(">4sIII", tag.encode("ascii"), _checksum(data), offset + len(body),
                                 len(data))
        body += data + b"\0" * (-len(data) % 4)
    font = bytearray(header + directory + body)
    head_at = len(header) + 16 * n + sum(len(tables[t]) + (-len(tables[t]) % 4)
                                         for t in tags[: tags.index("head")])
    struct.pack_into(">I", font, head_at + 8, (0xB1B0AFBA - _checksum(bytes(font))) & 0xFFFFFFFF)
    return bytes(font)
