"""Prometheus metrics of the service, in a registry of its own (one per app)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from ocrforge.result import Page

if TYPE_CHECKING:
    from ocrforge.server.batcher import Batcher

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
KNOWN_PATHS = {"/v1/ocr", "/v1/info", "/healthz", "/readyz", "/metrics", "/", "/docs", "/redoc",
               "/openapi.json"}
PREFIXES = ("/static/", "/docs-assets/")


def outcome_of(status: int) -> str:
    if status < 400:
        return "ok"
    if status == 429:
        return "overloaded"
    if status == 504:
        return "timeout"
    if status == 503:
        return "unavailable"
    if status in (401, 403):
        return "unauthorized"
    if status < 500:
        return "client_error"
    return "server_error"


class Metrics:
    CONTENT_TYPE = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        self.request_latency = Histogram(
            "ocrforge_request_duration_seconds", "OCR request latency (POST /v1/ocr) by outcome",
            ["outcome"], buckets=LATENCY_BUCKETS, registry=r)
        self.http_requests = Counter(
            "ocrforge_http_requests", "HTTP requests by path and status code",
            ["path", "status"], registry=r)
        self.pages = Counter("ocrforge_pages", "Pages recognised", registry=r)
        self.lines = Counter("ocrforge_lines", "Text lines returned", registry=r)
        self.characters = Counter("ocrforge_characters", "Characters returned", registry=r)
        self.errors = Counter("ocrforge_errors", "Errors answered, by kind", ["kind"], registry=r)
        self.batch_pages = Histogram(
            "ocrforge_batch_pages", "Pages per engine call (dynamic batch size)",
            buckets=BATCH_BUCKETS, registry=r)
        self.batch_requests = Histogram(
            "ocrforge_batch_requests", "Requests merged into one engine call",
            buckets=BATCH_BUCKETS, registry=r)
        self.batch_latency = Histogram(
            "ocrforge_batch_duration_seconds", "Engine time per batch",
            buckets=LATENCY_BUCKETS, registry=r)
        self.stage_seconds = Counter(
            "ocrforge_stage_seconds", "Engine time per pipeline stage", ["stage"], registry=r)
        self.queue_depth = Gauge("ocrforge_queue_depth", "Pages waiting for an engine", registry=r)
        self.admitted = Gauge(
            "ocrforge_admitted_requests", "Requests admitted (decoding, queued or running)",
            registry=r)
        self.admitted_pages = Gauge(
            "ocrforge_admitted_pages", "Pages of admitted requests not yet read", registry=r)
        self.decoded_pages = Gauge(
            "ocrforge_decoded_pages", "Decoded pages in memory (each holds a page slot)",
            registry=r)
        self.queue_limit = Gauge(
            "ocrforge_queue_limit", "Admission limit (pages); beyond it: 429", registry=r)
        self.unit_seconds = Gauge(
            "ocrforge_work_unit_seconds", "Measured engine seconds per work unit (one megapixel "
            "at detection plus a fixed share per page); sizes admission", registry=r)
        self.option_keys = Gauge(
            "ocrforge_option_keys", "Distinct engine option keys (det_limit bucket, cls) run so "
            "far; bounded by bucketing", registry=r)
        self.ready = Gauge("ocrforge_ready", "1 when the engines are loaded and warmed", registry=r)
        self.info = Info("ocrforge", "Model, runtime and batching configuration", registry=r)

    def bind_queue(self, batcher: Batcher, admitted: Callable[[], float], limit: int) -> None:
        self.queue_depth.set_function(lambda: batcher.queued_pages)
        self.admitted.set_function(admitted)
        self.admitted_pages.set_function(lambda: batcher.admitted_pages)
        self.decoded_pages.set_function(lambda: batcher.decoded_pages)
        self.unit_seconds.set_function(lambda: batcher.admission.unit_s)
        self.option_keys.set_function(lambda: len(batcher.keys_seen))
        self.queue_limit.set(limit)

    def on_batch(self, pages: int, requests: int, seconds: float) -> None:
        self.batch_pages.observe(pages)
        self.batch_requests.observe(requests)
        self.batch_latency.observe(seconds)

    def observe_pages(self, pages: list[Page]) -> None:
        self.pages.inc(len(pages))
        for p in pages:
            self.lines.inc(len(p.lines))
            self.characters.inc(sum(len(ln.text) for ln in p.lines))
            for stage, s in p.timings.items():
                self.stage_seconds.labels(stage).inc(s)

    def observe_http(self, path: str, status: int, seconds: float) -> None:
        label = path if path in KNOWN_PATHS else next(
            (p[:-1] for p in PREFIXES if path.startswith(p)), "other")
        self.http_requests.labels(label, str(status)).inc()
        if path == "/v1/ocr":
            self.request_latency.labels(outcome_of(status)).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
