"""Hostile clients against a real `ocrforge serve`: slow uploads, over-limit bodies, idle
connections, foreign Host headers (DNS rebinding), the demo page's headers, the API key from
a file, and a 5000-page PDF."""

from __future__ import annotations

import argparse
import io
import socket
import time

import httpx
import pytest
from serverkit import ServerProcess, text_image

KEY = "file-key-456"
LIMIT = 1024 * 1024  # --max-upload-mb 1 (and --max-inflight-mb 1)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("hardsrv")
    (d / "key").write_text(KEY + "\n")
    s = ServerProcess("--model-set", "ppocrv6-tiny", "--threads", "1", "--det-limit", "640",
                      "--max-upload-mb", "1", "--max-inflight-mb", "1", "--header-timeout", "1",
                      "--max-pdf-pages", "50", "--timeout", "20", "--allow-host", "ocr.example",
                      "--api-key-file", str(d / "key"), api_key=None, log_dir=d)
    s.api_key = KEY
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def png() -> bytes:
    return text_image(["Hardened 2026"], width=420)


def _open(srv: ServerProcess, head: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    sock.sendall(head.encode())
    return sock


def _post_head(srv: ServerProcess, length: int, extra: str = "") -> str:
    return (f"POST /v1/ocr HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nX-API-Key: {KEY}\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {length}\r\n{extra}\r\n")


def _status(sock: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data:
        more = sock.recv(4096)
        if not more:
            break
        data += more
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0


def test_slow_uploads_do_not_hold_the_upload_budget(srv, png):
    # each announces most of the server-wide in-flight budget, then trickles
    slow = [_open(srv, _post_head(srv, LIMIT - 1000) + "x") for _ in range(3)]
    try:
        time.sleep(0.5)
        with srv.client() as c:
            for _ in range(3):
                r = c.post("/v1/ocr", content=png)
                assert r.status_code == 200, r.text
    finally:
        for s in slow:
            s.close()


def test_over_limit_content_length_is_413_at_once(srv):
    for extra, within in (("", 2.5), ("Expect: 100-continue\r\n", 1.0)):
        t = time.monotonic()
        sock = _open(srv, _post_head(srv, 2 * LIMIT, extra))  # then sends nothing
        try:
            assert _status(sock) == 413
            assert time.monotonic() - t < within
        finally:
            sock.close()


def test_a_connection_that_never_finishes_its_headers_is_closed(srv):
    sock = _open(srv, f"POST /v1/ocr HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n")
    try:
        t = time.monotonic()
        assert sock.recv(4096) == b""  # closed by the server
        assert time.monotonic() - t < 5
    finally:
        sock.close()


@pytest.mark.parametrize(("host", "ok"), [
    ("localhost:{port}", True), ("127.0.0.1:{port}", True), ("[::1]:{port}", True),
    ("app.localhost", True), ("192.168.1.20:{port}", True), ("ocr.example", True),
    ("evil.example", False), ("localhost.evil.example:{port}", False), ("", False)])
def test_host_header_is_checked(srv, host, ok):
    with srv.client() as c:
        r = c.get("/v1/info", headers={"Host": host.format(port=srv.port)})
    if ok:
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 400 and r.json()["error"]["kind"] == "invalid_host"


def test_demo_page_and_api_send_security_headers(srv):
    with srv.client() as c:
        page = c.get("/")
        info = c.get("/v1/info")
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    for r in (page, info):
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"


def test_api_key_from_a_file(srv, png):
    assert httpx.post(srv.url + "/v1/ocr", content=png).status_code == 401
    with srv.client() as c:
        assert c.post("/v1/ocr", content=png).status_code == 200


def test_api_key_flag_warns_that_it_is_visible(tmp_path, capsys, monkeypatch):
    from ocrforge.commands.serve import api_key_from_args

    monkeypatch.setenv("OCRFORGE_API_KEY", "from-env")
    ns = argparse.Namespace(api_key=None, api_key_file=None)
    assert api_key_from_args(ns) == "from-env"
    ns.api_key = "flag"
    assert api_key_from_args(ns) == "flag"
    assert "process list" in capsys.readouterr().err
    (tmp_path / "empty").write_text("\n")
    ns.api_key_file = str(tmp_path / "empty")
    with pytest.raises(ValueError, match="empty"):
        api_key_from_args(ns)


def test_5000_page_pdf_is_too_many_pages_even_when_it_would_not_fit_the_timeout(srv):
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument.new()
    for _ in range(5000):
        doc.new_page(595, 842)  # A4
    buf = io.BytesIO()
    doc.save(buf)
    with srv.client() as c:
        r = c.post("/v1/ocr", params={"timeout": 1}, content=buf.getvalue())
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["kind"] == "too_many_pages" and "5000 pages" in err["message"]


def test_byte_budget_counts_received_bytes_and_the_oldest_upload_progresses():
    from ocrforge.server.admission import ByteBudget

    b = ByteBudget(10)
    old, young, slow = b.open(), b.open(), b.open()
    assert b.take(slow, 1)  # a slow client holds what it sent, nothing more
    assert b.take(old, 4) and b.take(young, 4)
    assert b.take(old, 4)  # does not fit: the younger uploads still receiving give theirs back
    assert young.evicted and slow.evicted and b.used == 8
    assert not b.take(young, 1)  # its request is answered 429
    assert b.received(old)
    late = b.open()
    assert not b.take(late, 3)  # a finished upload is not evicted
    b.release(old)
    assert b.take(late, 30) and b.used == 30  # one upload is always let in
