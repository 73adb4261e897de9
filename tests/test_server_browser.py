"""The demo page in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright).

Screenshots go to $OCRFORGE_SCREENSHOT_DIR when set, else to the pytest tmp dir.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from serverkit import API_KEY, norm, text_image, text_pdf

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="chromium not installed (apt-get install -y chromium)")

LINES = ["Total 128.50 CNY", "收据 北京 2026年", "Thank you"]


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def shots(tmp_path) -> Path:
    d = Path(os.environ.get("OCRFORGE_SCREENSHOT_DIR") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _open(browser, ocr_server):
    # the page is behind the API key too: the browser answers the Basic challenge
    ctx = browser.new_context(http_credentials={"username": "demo", "password": API_KEY},
                              viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(ocr_server.url + "/")
    page.wait_for_selector("#status.ok", timeout=30_000)
    return ctx, page, errors


def test_demo_page_image(browser, ocr_server, tmp_path, shots):
    f = tmp_path / "receipt.png"
    f.write_bytes(text_image(LINES, width=760))
    ctx, page, errors = _open(browser, ocr_server)
    try:
        page.set_input_files("#file", str(f))
        page.wait_for_selector('#result[data-state="done"]', timeout=60_000)
        text = page.inner_text("#text")
        assert [norm(t) for t in text.split("\n")] == [norm(t) for t in LINES]
        n_lines = page.locator("#lines li").count()
        assert n_lines == 3
        assert page.locator("#overlay polygon.line").count() == n_lines
        box = page.locator("#overlay polygon.line").first.bounding_box()
        assert box and box["width"] > 50 and box["height"] > 10  # drawn over the image, visibly
        assert page.locator("#preview").evaluate("img => img.naturalWidth") == 760
        page.screenshot(path=str(shots / "demo.png"), full_page=True)
        assert (shots / "demo.png").stat().st_size > 10_000
        assert not errors, errors
    finally:
        ctx.close()


def test_demo_page_pdf_and_error(browser, ocr_server, tmp_path, shots):
    pdf = tmp_path / "two.pdf"
    pdf.write_bytes(text_pdf([["Alpha page 1"], ["Beta page 2"]]))
    bad = tmp_path / "notes.png"
    bad.write_bytes(b"this is text, not a picture")
    ctx, page, errors = _open(browser, ocr_server)
    try:
        page.set_input_files("#file", str(pdf))
        page.wait_for_selector('#result[data-state="done"]', timeout=60_000)
        assert norm(page.inner_text("#text")) == "ALPHAPAGE1"
        assert page.is_visible("#pager")
        page.click("#next")
        assert norm(page.inner_text("#text")) == "BETAPAGE2"
        assert page.locator("#overlay text").count() == 1  # no picture of a PDF: text in its box
        page.screenshot(path=str(shots / "demo-pdf.png"), full_page=True)
        page.set_input_files("#file", str(bad))
        page.wait_for_selector('#result[data-state="error"]', timeout=30_000)
        msg = page.inner_text("#message")
        assert "415" in msg and "not a supported image or PDF" in msg
        assert not errors, errors
    finally:
        ctx.close()


def test_demo_page_before_any_upload(browser, ocr_server):
    """Issue 20 item 13: no broken-image icon and no failed request before an upload."""
    ctx = browser.new_context(http_credentials={"username": "demo", "password": API_KEY},
                              viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    bad: list[str] = []
    # 401 is the Basic challenge the browser answers with the credentials
    page.on("response", lambda r: r.status >= 400 and r.status != 401
            and bad.append(f"{r.status} {r.url}"))
    page.on("requestfailed", lambda r: bad.append(f"failed {r.url}"))
    try:
        page.goto(ocr_server.url + "/")
        page.wait_for_selector("#status.ok", timeout=30_000)
        page.wait_for_timeout(500)
        assert not page.is_visible("#result") and not page.is_visible("#preview")
        assert not bad, bad
    finally:
        ctx.close()
