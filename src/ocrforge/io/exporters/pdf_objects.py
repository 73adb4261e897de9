"""A minimal PDF file writer: numbered objects, Flate streams, cross-reference table."""

from __future__ import annotations

import hashlib
import zlib


def pdf_string(s: str) -> bytes:
    """A PDF text string: UTF-16BE with BOM in hex, safe for any characters."""
    return b"<FEFF" + s.encode("utf-16-be").hex().upper().encode("ascii") + b">"


def num(v: float) -> str:
    """A compact PDF number (at most 3 decimals, no exponent)."""
    s = f"{v:.3f}".rstrip("0").rstrip(".")
    return "0" if s in ("", "-0") else s


class PdfWriter:
    def __init__(self) -> None:
        self._objects: list[bytes | None] = []

    def reserve(self) -> int:
        """A number for an object written later (for forward references)."""
        self._objects.append(None)
        return len(self._objects)

    def add(self, body: bytes | str, number: int | None = None) -> int:
        data = body.encode("latin-1") if isinstance(body, str) else body
        if number is None:
            self._objects.append(data)
            return len(self._objects)
        self._objects[number - 1] = data
        return number

    def add_stream(self, entries: str, data: bytes, *, compress: bool = True,
                   number: int | None = None) -> int:
        if compress:
            data = zlib.compress(data, 6)
            entries += " /Filter /FlateDecode"
        head = f"<< {entries} /Length {len(data)} >>\nstream\n".encode("latin-1")
        return self.add(head + data + b"\nendstream", number)

    def tobytes(self, root: int, info: int) -> bytes:
        out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
        offsets = []
        for i, body in enumerate(self._objects, 1):
            if body is None:
                raise ValueError(f"PDF object {i} was reserved but never written")
            offsets.append(len(out))
            out += f"{i} 0 obj\n".encode("ascii") + body + b"\nendobj\n"
        xref = len(out)
        out += f"xref\n0 {len(offsets) + 1}\n0000000000 65535 f \n".encode("ascii")
        out += b"".join(f"{o:010d} 00000 n \n".encode("ascii") for o in offsets)
        doc_id = hashlib.md5(out).hexdigest().upper()
        out += (f"trailer\n<< /Size {len(offsets) + 1} /Root {root} 0 R /Info {info} 0 R "
                f"/ID [<{doc_id}> <{doc_id}>] >>\nstartxref\n{xref}\n%%EOF\n").encode("ascii")
        return bytes(out)
