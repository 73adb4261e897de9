"""ALTO 4.4 XML (validates against alto-4-4.xsd): one Page per page, blocks in reading order
inside the PrintSpace, TextLine > String/SP with pixel coordinates and word confidence (WC).

Coordinates are pixels of the source image as it was given: a page that page orientation
turned is mapped back onto it (structure.as_given) and its Page states the turn as ROTATION
(ALTO 4.4: the default rotation of the page's text, degrees counter-clockwise).

Block kinds other than plain paragraphs are named by LayoutTags (TAGREFS) so the reading order
stays the element order; a table is a ComposedBlock (TYPE="table") of one TextBlock per cell,
a figure an Illustration.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape, quoteattr

from ocrforge.io.exporters.structure import (
    BBox,
    as_given,
    baseline,
    quad_bbox,
    regions,
    text_angle,
    union_bbox,
    words_of,
    xml_text,
)
from ocrforge.result import BLOCK_KINDS, Line, Page

NS = "http://www.loc.gov/standards/alto/ns-v4#"
SCHEMA_LOCATION = f"{NS} http://www.loc.gov/alto/v4/alto-4-4.xsd"
TAGGED_KINDS = tuple(k for k in BLOCK_KINDS if k != "paragraph")


def render(pages: list[Page], images: Any = None) -> bytes:
    from ocrforge.version import __version__

    source = pages[0].source if pages else ""
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<alto xmlns="{NS}" xmlns:xlink="http://www.w3.org/1999/xlink" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        f'xsi:schemaLocation="{SCHEMA_LOCATION}">',
        " <Description>",
        "  <MeasurementUnit>pixel</MeasurementUnit>",
        "  <sourceImageInformation>",
        f"   <fileName>{escape(xml_text(source))}</fileName>",
        "  </sourceImageInformation>",
        '  <Processing ID="OCR_0">',
        "   <processingCategory>contentGeneration</processingCategory>",
        "   <processingSoftware>",
        "    <softwareName>ocrforge</softwareName>",
        f"    <softwareVersion>{escape(__version__)}</softwareVersion>",
        "   </processingSoftware>",
        "  </Processing>",
        " </Description>",
    ]
    used = sorted({r.kind for p in pages for r in regions(p) if r.kind in TAGGED_KINDS},
                  key=TAGGED_KINDS.index)
    if used:
        out.append(" <Tags>")
        out += [f'  <LayoutTag ID="TAG_{k}" LABEL="{k}"/>' for k in used]
        out.append(" </Tags>")
    out.append(" <Layout>")
    for n, page in enumerate(pages, 1):
        out += _page(page, n)
    out += [" </Layout>", "</alto>", ""]
    return "\n".join(out).encode("utf-8")


class _Ids:
    def __init__(self, page_no: int):
        self.page_no = page_no
        self.counts: dict[str, int] = {}

    def __call__(self, kind: str) -> str:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return f"{kind}_{self.page_no}_{self.counts[kind]}"


def _page(page: Page, n: int) -> list[str]:
    ids = _Ids(n)
    page = as_given(page)  # coordinates of the source image, as it was given
    W, H = page.width, page.height
    rot = f' ROTATION="{text_angle(page)}"' if page.rotation else ""
    out = [f'  <Page ID="page_{n}" PHYSICAL_IMG_NR="{n}" WIDTH="{W}" HEIGHT="{H}"{rot} '
           'PROCESSINGREFS="OCR_0">',
           f'   <PrintSpace HPOS="0" VPOS="0" WIDTH="{W}" HEIGHT="{H}">']
    for r in regions(page):
        tag = f' TAGREFS="TAG_{r.kind}"' if r.kind in TAGGED_KINDS else ""
        if r.table is not None:
            out.append(f'    <ComposedBlock ID="{ids("table")}"{tag} {_pos(r.bbox)} TYPE="table">')
            for cell in sorted(r.table.cells, key=lambda c: (c.row, c.col)):
                lines = [page.lines[i] for i in cell.lines if 0 <= i < len(page.lines)]
                out += _text_block(lines, tuple(cell.bbox), ids, "", indent=5)
            out.append("    </ComposedBlock>")
            continue
        lines = [page.lines[i] for i in r.lines]
        if r.kind == "figure":
            if lines:  # text inside a figure: a composed block of the picture and its text
                out.append(f'    <ComposedBlock ID="{ids("figure")}"{tag} {_pos(r.bbox)} TYPE="figure">')
                out.append(f'     <Illustration ID="{ids("illustration")}" {_pos(r.bbox)}/>')
                out += _text_block(lines, None, ids, "", indent=5)
                out.append("    </ComposedBlock>")
            else:
                out.append(f'    <Illustration ID="{ids("illustration")}"{tag} {_pos(r.bbox)}/>')
            continue
        out += _text_block(lines, None, ids, tag, indent=4)
    out += ["   </PrintSpace>", "  </Page>"]
    return out


def _text_block(lines: list[Line], box: BBox | None, ids: _Ids, tag: str, indent: int) -> list[str]:
    lines = [ln for ln in lines if words_of(ln)]
    if not lines and box is None:
        return []
    pad = " " * indent
    box = box or union_bbox([ln.bbox for ln in lines])
    out = [f'{pad}<TextBlock ID="{ids("block")}"{tag} {_pos(box)}>']
    for ln in lines:
        b = baseline(ln.poly)
        (x0, y0) = b.origin
        x1, y1 = x0 + b.direction[0] * b.length, y0 + b.direction[1] * b.length
        out.append(f'{pad} <TextLine ID="{ids("line")}" {_pos(ln.bbox)} '
                   f'BASELINE="{x0:.0f},{y0:.0f} {x1:.0f},{y1:.0f}">')
        words = words_of(ln)
        for k, w in enumerate(words):
            wb = quad_bbox(w.poly)
            wc = min(max(float(w.score), 0.0), 1.0)
            out.append(f'{pad}  <String ID="{ids("string")}" {_pos(wb)} '
                       f'CONTENT={quoteattr(xml_text(w.text))} WC="{wc:.3f}"/>')
            if k + 1 < len(words):
                out.append(f'{pad}  <SP {_space(wb, quad_bbox(words[k + 1].poly), b.direction)}/>')
        out.append(f"{pad} </TextLine>")
    out.append(f"{pad}</TextBlock>")
    return out


def _space(wb: BBox, nb: BBox, direction: tuple[float, float]) -> str:
    """SP between two words, along the line's direction (rightwards on an upright page, down,
    left or up on a turned one): where the first word ends and how far to the next."""
    ux, uy = direction
    if abs(ux) >= abs(uy):
        x, gap, y = (wb[2], nb[0] - wb[2], wb[1]) if ux > 0 else (nb[2], wb[0] - nb[2], wb[1])
    else:
        y, gap, x = (wb[3], nb[1] - wb[3], wb[0]) if uy > 0 else (nb[3], wb[1] - nb[3], wb[0])
    return f'HPOS="{x:.0f}" VPOS="{y:.0f}" WIDTH="{max(gap, 0.0):.0f}"'


def _pos(box: BBox) -> str:
    x0, y0, x1, y1 = box
    return f'HPOS="{x0:.0f}" VPOS="{y0:.0f}" WIDTH="{x1 - x0:.0f}" HEIGHT="{y1 - y0:.0f}"'
