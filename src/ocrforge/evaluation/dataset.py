"""Labeled OCR data sets in the ``labels.jsonl`` format of the dev set.

A data set is a folder holding ``labels.jsonl`` (one JSON object per image) and the images it
names (paths relative to the folder). Each record has either ``lines`` (text + 4-point polygon
in image pixels, clockwise from top-left, optional ``ignore: true`` for don't-care regions,
text ``###``) or ``text`` (the whole image's text, no boxes). ``lang`` and ``kind`` are used to
group results. ``load_dataset`` also accepts the path of a ``.jsonl`` file directly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LABELS = "labels.jsonl"


class DatasetError(ValueError):
    """The data set is missing or one of its records is malformed (the message names it)."""


@dataclass
class RefLine:
    text: str
    poly: list[list[float]]
    ignore: bool = False


@dataclass
class Record:
    image: Path
    lang: str = "unknown"
    kind: str = "unknown"
    lines: list[RefLine] | None = None
    text: str | None = None
    subkind: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def has_boxes(self) -> bool:
        return self.lines is not None

    @property
    def care_lines(self) -> list[RefLine]:
        return [ln for ln in (self.lines or []) if not ln.ignore]

    @property
    def name(self) -> str:
        return self.image.name


def _poly(v: Any, where: str) -> list[list[float]]:
    try:
        pts = [[float(p[0]), float(p[1])] for p in v]
    except (TypeError, ValueError, IndexError):
        raise DatasetError(f"{where}: poly must be a list of [x, y] points") from None
    if len(pts) < 3:
        raise DatasetError(f"{where}: poly needs at least 3 points, got {len(pts)}")
    return pts


def parse_record(obj: dict[str, Any], root: Path, where: str) -> Record:
    if not isinstance(obj, dict) or "image" not in obj:
        raise DatasetError(f"{where}: record needs an 'image' field")
    image = (root / obj["image"]).resolve()
    lines = None
    if "lines" in obj:
        lines = []
        for k, ln in enumerate(obj["lines"]):
            w = f"{where} line {k}"
            if "poly" not in ln:
                raise DatasetError(f"{w}: line needs a 'poly'")
            text = str(ln.get("text", ""))
            lines.append(RefLine(text, _poly(ln["poly"], w), bool(ln.get("ignore", False)) or text == "###"))
    elif "text" in obj:
        pass
    else:
        raise DatasetError(f"{where}: record needs 'lines' or 'text'")
    known = {"image", "lang", "kind", "subkind", "lines", "text"}
    return Record(image=image, lang=str(obj.get("lang", "unknown")), kind=str(obj.get("kind", "unknown")),
                  lines=lines, text=None if lines is not None else str(obj["text"]),
                  subkind=obj.get("subkind"), meta={k: v for k, v in obj.items() if k not in known})


def labels_path(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / LABELS
    if not p.is_file():
        raise DatasetError(f"{path}: no {LABELS} found (a data set is a folder with {LABELS} and images/)")
    return p


def load_dataset(path: str | Path, *, check_images: bool = True) -> list[Record]:
    """Records of a data set folder (or of a labels .jsonl file), in file order."""
    lp = labels_path(path)
    root = lp.parent
    records = []
    with lp.open(encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            where = f"{lp}:{n}"
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{where}: not valid JSON ({e})") from None
            rec = parse_record(obj, root, where)
            if check_images and not rec.image.is_file():
                raise DatasetError(f"{where}: image {rec.image} not found")
            records.append(rec)
    if not records:
        raise DatasetError(f"{lp}: no records")
    return records


def record_to_dict(rec: Record, root: Path) -> dict[str, Any]:
    """Inverse of ``parse_record`` (image path relative to ``root``)."""
    d: dict[str, Any] = {"image": rec.image.relative_to(root).as_posix(), "lang": rec.lang, "kind": rec.kind}
    if rec.subkind:
        d["subkind"] = rec.subkind
    d.update(rec.meta)
    if rec.lines is not None:
        d["lines"] = [{"text": ln.text, "poly": ln.poly, **({"ignore": True} if ln.ignore else {})}
                      for ln in rec.lines]
    else:
        d["text"] = rec.text or ""
    return d
