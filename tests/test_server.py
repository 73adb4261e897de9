"""The HTTP service end to end: real engine, real uvicorn process, real HTTP (httpx)."""

from __future__ import annotations

import base64
import io
import random
import re
import signal
import threading
import time

import httpx
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families
from serverkit import API_KEY, ServerProcess, bomb_png, in_threads, norm, text_image, text_pdf

from ocrforge.client import Client, OCRServerError
from ocrforge.config import DET_LIMIT_BUCKETS, bucket_det_limit

LINES = ["Hello ocrforge 2026", "你好世界 欢迎使用", "Invoice No. 4711"]


@pytest.fixture(scope="module")
def good_png() -> bytes:
    return text_image(LINES)


@pytest.fixture(scope="module")
def small_png() -> bytes:
    return text_image(["OK 42"], width=240)


def post(srv: ServerProcess, data: bytes, *, name: str = "page.png", params=None,
         headers=None, raw: bool = False) -> httpx.Response:
    h = {**srv.headers(), **(headers or {})}
    if raw:
        return httpx.post(srv.url + "/v1/ocr", content=data, params=params, headers=h, timeout=60)
    return httpx.post(srv.url + "/v1/ocr", files={"file": (name, data)}, params=params,
                      headers=h, timeout=60)


def assert_serving(srv: ServerProcess, png: bytes) -> None:
    r = post(srv, png)
    assert r.status_code == 200, r.text
    assert norm(r.json()["text"]) == "OK42"


def metric_values(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# ------------------------------------------------------------------ basic service
def test_health_and_ready_need_no_key_everything_else_does(ocr_server):
    assert httpx.get(ocr_server.url + "/healthz").json()["status"] == "ok"
    ready = httpx.get(ocr_server.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    for path in ("/metrics", "/", "/v1/info", "/docs", "/openapi.json"):
        r = httpx.get(ocr_server.url + path)
        assert r.status_code == 401, path
        assert r.json()["error"]["kind"] == "unauthorized"
        assert "Basic" in r.headers["www-authenticate"]


def test_api_key_forms(ocr_server, small_png):
    url = ocr_server.url + "/v1/ocr"
    files = {"file": ("a.png", small_png)}
    assert httpx.post(url, files=files).status_code == 401
    r = httpx.post(url, files=files, headers={"X-API-Key": "wrong"})
    assert r.status_code == 401 and "API key" in r.json()["error"]["message"]
    assert httpx.post(url, files=files, headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200
    basic = base64.b64encode(f"anyone:{API_KEY}".encode()).decode()
    assert httpx.post(url, files=files, headers={"Authorization": f"Basic {basic}"}).status_code == 200


def test_ocr_image_json_envelope(ocr_server, good_png):
    r = post(ocr_server, good_png, name="hello.png", headers={"X-Request-ID": "my-req-1"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["schema"] == "ocrforge.response/1"
    assert body["request_id"] == "my-req-1" == r.headers["x-request-id"]
    assert body["source"] == "hello.png" and body["content_type"] == "png"
    assert [norm(t) for t in body["text"].split("\n")] == [norm(t) for t in LINES]
    (page,) = body["pages"]
    assert page["schema"] == "ocrforge.page/1" and page["width"] == 900
    assert len(page["lines"]) == 3 and all(len(ln["poly"]) == 4 for ln in page["lines"])
    assert {"receive", "decode", "queue", "inference", "total"} <= set(body["timings_ms"])
    assert body["timings_ms"]["total"] >= body["timings_ms"]["inference"] > 0
    assert body["batch"]["pages"] >= 1
    assert "inference;dur=" in r.headers["server-timing"]


def test_raw_body_is_sniffed_not_trusted(ocr_server, good_png):
    # a PNG sent as the raw body, claiming to be a PDF: the content decides
    r = post(ocr_server, good_png, raw=True, params={"format": "text"},
             headers={"Content-Type": "application/pdf"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    assert norm(r.text) == norm("".join(LINES))
    md = post(ocr_server, good_png, name="x.pdf", params={"format": "markdown"})
    assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
    assert "Invoice No. 4711" in md.text


def test_pdf_two_pages(ocr_server):
    pdf = text_pdf([["First page 111"], ["Second page 222"]])
    r = post(ocr_server, pdf, name="two.pdf")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["content_type"] == "pdf"
    assert [p["page"] for p in body["pages"]] == [0, 1]
    assert [norm(p["text"]) for p in body["pages"]] == ["FIRSTPAGE111", "SECONDPAGE222"]
    assert body["text"].split("\f") == [p["text"] for p in body["pages"]]


def test_form_options_and_query_options(ocr_server, good_png):
    r = httpx.post(ocr_server.url + "/v1/ocr", headers=ocr_server.headers(),
                   files={"file": ("a.png", good_png)},
                   data={"format": "text", "det_limit": "960", "cls": "on"})
    assert r.status_code == 200, r.text
    assert norm(r.text) == norm("".join(LINES))


# ------------------------------------------------------------------ bad input
def _png_1x1() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (1, 1), "white").save(buf, "PNG")
    return buf.getvalue()


BAD_INPUTS = [
    # (id, data factory, status, error kind, words in the message)
    ("empty", lambda: b"", 400, "empty_input", "empty"),
    ("corrupt_png", lambda: b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 50, 400, "corrupt_input", "corrupt"),
    ("corrupt_pdf", lambda: b"%PDF-1.7\n" + b"nonsense " * 50, 400, "corrupt_input", "PDF"),
    ("wrong_type", lambda: b"<html><body>not an image</body></html>", 415, "unsupported_media_type",
     "not a supported image or PDF"),
    ("too_large", lambda: b"\xff\xd8\xff" + b"\x00" * (1024 * 1024 + 10), 413, "payload_too_large",
     "limit of 1,048,576 bytes"),
    ("bomb", lambda: bomb_png(5000), 422, "too_many_pixels", "decompression bomb"),
    ("too_many_pages", lambda: text_pdf([["a"], ["b"], ["c"], ["d"]]), 422, "too_many_pages",
     "4 pages, over the limit of 3"),
    ("too_small", _png_1x1, 422, "image_too_small", "too small"),
]


@pytest.mark.parametrize("raw", [False, True], ids=["multipart", "raw"])
@pytest.mark.parametrize(("case", "make", "status", "kind", "words"), BAD_INPUTS,
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_gets_clear_4xx_and_server_keeps_serving(ocr_server, small_png, raw, case, make,
                                                           status, kind, words):
    r = post(ocr_server, make(), name=f"{case}.png", raw=raw)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["kind"] == kind and err["status"] == status
    assert words in err["message"]
    if status not in (413,) and not raw:
        assert f"{case}.png" in err["message"]  # the message names the input
    assert err["request_id"] == r.headers["x-request-id"]
    assert_serving(ocr_server, small_png)


def test_no_local_paths_or_urls(ocr_server, small_png):
    url = ocr_server.url + "/v1/ocr"
    h = ocr_server.headers()
    r = httpx.post(url, headers=h, files={"file": (None, "/etc/hostname")})
    assert r.status_code == 400 and "never reads paths" in r.json()["error"]["message"]
    r = httpx.post(url, headers=h, json={"url": "http://127.0.0.1/secret.png"})
    assert r.status_code == 415
    r = httpx.post(url, headers=h, content=b"/etc/passwd")
    assert r.status_code == 415
    r = httpx.post(url, headers=h, files={"file": ("a.png", small_png)}, data={"url": "http://x"})
    assert r.status_code == 400 and "unknown form field 'url'" in r.json()["error"]["message"]


@pytest.mark.parametrize(("params", "words"), [
    ({"format": "xml"}, "format"),
    ({"det_limit": "5"}, "det_limit"),
    ({"det_limit": "abc"}, "det_limit"),
    ({"cls": "maybe"}, "cls"),
    ({"timeout": "-1"}, "timeout"),
])
def test_bad_parameters_are_400(ocr_server, small_png, params, words):
    r = post(ocr_server, small_png, params=params)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["kind"] == "invalid_parameter"
    assert words in r.json()["error"]["message"]


def test_missing_file_and_malformed_multipart(ocr_server):
    h = ocr_server.headers()
    r = httpx.post(ocr_server.url + "/v1/ocr", headers=h, data={"format": "json"},
                   files={"other": ("x", b"abc")})
    assert r.status_code == 400
    r = httpx.post(ocr_server.url + "/v1/ocr", content=b"--xx\r\nbroken",
                   headers={**h, "Content-Type": "multipart/form-data; boundary=xx"})
    assert r.status_code == 400 and r.json()["error"]["kind"] in ("bad_request",)


def test_request_that_cannot_finish_in_its_timeout_is_refused_at_once(ocr_server, good_png,
                                                                     small_png):
    # admitted requests are sized to finish (a deadline passed anyway is 504: test_batcher_*)
    t = time.perf_counter()
    r = post(ocr_server, good_png, params={"timeout": "0.001"})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["kind"] == "too_much_work"
    assert "timeout" in r.json()["error"]["message"]
    assert time.perf_counter() - t < 5  # refused up front, not after working on it
    assert_serving(ocr_server, small_png)


# ------------------------------------------------------------------ load behaviour
def _concurrent(srv: ServerProcess, data: bytes, n: int) -> list[httpx.Response | Exception]:
    out: list = [None] * n
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        try:
            with srv.client() as c:
                barrier.wait()
                out[i] = c.post("/v1/ocr", files={"file": (f"r{i}.png", data)})
        except Exception as e:  # recorded: a lost response fails the test
            out[i] = e

    in_threads(one, n, 120)
    return out


def test_concurrent_requests_are_batched(ocr_server, small_png):
    for _ in range(3):  # arrival jitter on a busy machine: allow a retry
        rs = _concurrent(ocr_server, small_png, 4)
        assert all(isinstance(r, httpx.Response) and r.status_code == 200 for r in rs), rs
        assert all(norm(r.json()["text"]) == "OK42" for r in rs)
        if max(r.json()["batch"]["requests"] for r in rs) > 1:
            return
    pytest.fail("4 simultaneous requests never shared an engine call")


def test_overload_answers_429_never_5xx(ocr_server, good_png, small_png):
    rs = _concurrent(ocr_server, good_png, 16)
    assert all(isinstance(r, httpx.Response) for r in rs), [r for r in rs if not isinstance(r, httpx.Response)]
    codes = [r.status_code for r in rs]
    assert set(codes) <= {200, 429}, codes
    assert codes.count(429) >= 1 and codes.count(200) >= 4, codes
    for r in rs:
        if r.status_code == 429:
            assert int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["kind"] == "overloaded"
        else:
            assert norm(r.json()["text"]) == norm("".join(LINES))
    assert_serving(ocr_server, small_png)


# ------------------------------------------------------------------ observability, docs, client
def test_metrics(ocr_server, small_png):
    with ocr_server.client() as c:
        before = metric_values(c.get("/metrics").text)
        assert c.post("/v1/ocr", files={"file": ("a.png", small_png)}).status_code == 200
        assert c.post("/v1/ocr", files={"file": ("a.txt", b"plain text")}).status_code == 415
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    after = metric_values(r.text)

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("ocrforge_request_duration_seconds_count", outcome="ok") == 1
    assert delta("ocrforge_request_duration_seconds_count", outcome="client_error") == 1
    assert delta("ocrforge_errors_total", kind="unsupported_media_type") == 1
    assert delta("ocrforge_pages_total") == 1
    assert delta("ocrforge_lines_total") >= 1 and delta("ocrforge_characters_total") >= 3
    assert delta("ocrforge_batch_pages_count") >= 1
    assert delta("ocrforge_http_requests_total", path="/v1/ocr", status="415") == 1
    assert after[("ocrforge_queue_depth", ())] == 0
    assert after[("ocrforge_queue_limit", ())] == 4
    assert after[("ocrforge_ready", ())] == 1
    info = [k for k in after if k[0] == "ocrforge_info"]
    assert info and dict(info[0][1])["model_set"] and dict(info[0][1])["runtime"] in ("onnxruntime", "openvino")
    assert after[("process_resident_memory_bytes", ())] > 0


def test_openapi_and_demo_page(ocr_server):
    with ocr_server.client() as c:
        spec = c.get("/openapi.json").json()
        body = spec["paths"]["/v1/ocr"]["post"]["requestBody"]["content"]
        assert "multipart/form-data" in body and "application/octet-stream" in body
        assert c.get("/docs").status_code == 200
        page = c.get("/")
        assert page.status_code == 200 and 'id="file"' in page.text
        assert c.get("/static/app.js").status_code == 200
        assert c.get("/nope").json()["error"]["kind"] == "not_found"


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_api_docs_load_nothing_from_outside(ocr_server, path):
    """Issue 14 item 17: the docs pages reference only this server's URLs, which all answer."""
    with ocr_server.client() as c:
        page = c.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "://" not in page.text and "//cdn" not in page.text, page.text
        refs = re.findall(r"""(?:src|href|spec-url)=["']([^"']+)["']""", page.text)
        refs += re.findall(r"""url: ?["']([^"']+)["']""", page.text)
        assert len(refs) >= 3, refs  # script, favicon, schema (and the stylesheet for Swagger)
        for ref in refs:
            assert ref.startswith("/") and not ref.startswith("//"), ref
            r = c.get(ref)
            assert r.status_code == 200 and len(r.content) > 0, ref
        js = [ref for ref in refs if ref.endswith(".js")]
        assert js and all(len(c.get(ref).content) > 100_000 for ref in js)  # the real bundles
        for ref in js:  # issue 20 item 13: ReDoc's own bundle drew its logo from cdn.redoc.ly
            assert b"https://cdn." not in c.get(ref).content, ref


def test_det_limit_is_bucketed_and_memory_stays_bounded(ocr_server):
    """Issue 9 item 6: 200 requests with 50 distinct det_limit values run under at most
    len(DET_LIMIT_BUCKETS) option keys, and the server's RSS does not grow with them."""
    rng = random.Random(0)
    limits = sorted(rng.sample(range(48, 1500), 50))
    seq = [limits[i % 50] for i in range(200)]
    rng.shuffle(seq)
    png = text_image(["B7"], width=1400)

    def metric(c: httpx.Client, name: str) -> float:
        return metric_values(c.get("/metrics").text)[(name, ())]

    def send(c: httpx.Client, chunk: list[int]) -> None:
        for lim in chunk:
            for _ in range(50):  # the shared server admits 4 pages: wait out a 429
                r = c.post("/v1/ocr", params={"det_limit": lim, "format": "text"},
                           files={"file": ("b.png", png)})
                if r.status_code != 429:
                    break
                time.sleep(0.2)
            assert r.status_code == 200, r.text
            if lim >= 320:  # small limits shrink the line below legibility
                assert "B7" in r.text, (lim, r.text)

    with ocr_server.client() as c:
        keys0 = metric(c, "ocrforge_option_keys")
        send(c, seq[:20])
        rss20 = metric(c, "process_resident_memory_bytes")
        rest = seq[20:]
        clients = [ocr_server.client() for _ in range(4)]
        threads = [threading.Thread(target=send, args=(cl, rest[k::4]))
                   for k, cl in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        for cl in clients:
            cl.close()
        rss200 = metric(c, "process_resident_memory_bytes")
        keys = metric(c, "ocrforge_option_keys")
    buckets = {bucket_det_limit(v) for v in seq}
    assert 4 <= len(buckets) <= len(DET_LIMIT_BUCKETS)
    assert keys - keys0 <= len(buckets) and keys <= 2 * len(DET_LIMIT_BUCKETS), (keys0, keys)
    grown = (rss200 - rss20) / 2**20
    assert grown < 48, f"RSS grew {grown:.1f} MB from request 20 to 200"


def test_python_client(ocr_server, good_png, tmp_path):
    f = tmp_path / "hello.png"
    f.write_bytes(good_png)
    with Client(ocr_server.url, api_key=API_KEY) as c:
        assert c.ready()
        res = c.ocr(f)
        assert res["source"] == "hello.png" and norm(res["text"]) == norm("".join(LINES))
        assert norm(c.ocr(good_png, format="text")) == norm("".join(LINES))
        with pytest.raises(OCRServerError) as ei:
            c.ocr(b"not an image")
        assert ei.value.status == 415 and ei.value.kind == "unsupported_media_type"
    with Client(ocr_server.url, api_key="wrong") as c, pytest.raises(OCRServerError) as ei:
        c.ocr(good_png)
    assert ei.value.status == 401


def test_graceful_shutdown_drains_in_flight_requests(tmp_path):
    srv = ServerProcess("--det-limit", "960", api_key=None, log_dir=tmp_path)
    try:
        srv.wait_ready()
        page = text_image(["Draining on shutdown 77"] * 12, width=1400)
        result: dict = {}

        def request() -> None:
            try:
                result["r"] = httpx.post(srv.url + "/v1/ocr", files={"file": ("d.png", page)},
                                         timeout=60)
            except Exception as e:
                result["r"] = e

        t = threading.Thread(target=request)
        t.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # wait until the request is admitted
            m = metric_values(httpx.get(srv.url + "/metrics").text)
            if m.get(("ocrforge_admitted_requests", ()), 0) >= 1:
                break
            time.sleep(0.005)
        code = srv.stop()
        t.join(60)
    finally:
        srv.stop()
    r = result["r"]
    assert isinstance(r, httpx.Response), r
    assert r.status_code == 200 and "Draining on shutdown 77" in r.json()["text"]
    assert code in (0, -signal.SIGTERM), srv.log()  # uvicorn re-raises SIGTERM after a clean exit
    assert "Traceback" not in srv.log()
