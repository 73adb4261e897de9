"""Server settings: every limit of the HTTP service in one place."""

from __future__ import annotations

from dataclasses import dataclass, field

from ocrforge.config import EngineConfig


@dataclass
class ServerSettings:
    """Limits and batching knobs of ``ocrforge serve`` (the engine itself is ``engine``)."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    # engines: one per entry of ``devices`` if given, else ``workers`` replicas of ``engine``
    workers: int = 1
    devices: list[str] | None = None
    # dynamic batching: pages of concurrent requests merged into one engine call
    max_batch_pages: int = 8
    max_wait_ms: float = 10.0
    # beyond its first page a batch takes pages only while its estimated engine time (the
    # admission cost model at the measured speed) stays within this: big pages go one by one
    max_batch_ms: float = 1000.0
    # admission (server/admission.py): pages of admitted requests (decoding, queued, running);
    # beyond this -> 429. A request is also refused when the work queued ahead of it, at the
    # measured engine speed, would not let it finish within admission_safety x its timeout.
    queue_size: int = 512
    admission_safety: float = 0.8
    # decoded pages in memory at once (0: two batches per engine)
    max_decoded_pages: int = 0
    request_timeout_s: float = 60.0
    max_upload_bytes: int = 32 * 1024 * 1024
    # upload bytes held over all requests being read or served; beyond this -> 429
    max_inflight_upload_bytes: int = 256 * 1024 * 1024
    max_pixels: int = 40_000_000
    max_pdf_pages: int = 50
    max_det_limit: int = 4096
    decode_threads: int = 2
    api_key: str | None = None
    # Host header names let in besides localhost, *.localhost and IP literals (DNS rebinding:
    # a page on an attacker's name resolved to 127.0.0.1); "*" lets in any
    allowed_hosts: list[str] = field(default_factory=list)
    # a connection that has not sent a request's headers within this is closed (slowloris)
    header_timeout_s: float = 10.0
    warmup: bool = True
    # seconds a server on the GPU (the torch runtime's scheduler) may spend before it says ready
    # capturing the CUDA graphs of the bucket shapes requests will meet, most used first; what
    # is left is captured while the server is idle or as requests bring them. With the whole
    # plan (53 shapes at the default limit) an H100 server was ready after 71-80 s and its first
    # 32 requests took p95 0.35 s; with 30 s, ready after 48-57 s and p95 1.8-3.9 s
    # (2026-12-07, docs/BENCHMARKS.md). 0: only the warm-up page's shapes
    warmup_s: float = 120.0
    # runtime torch: requests' pages join one long-lived run of the engine's GPU scheduler
    # (scheduling/gpu_stream.py) rather than each batch through ocr_images. None: on for an
    # engine on CUDA (20.8 against 6.1 requests/s at concurrency 1, H100, 2026-12-05), off
    # on the CPU
    gpu_pipeline: bool | None = None
    # the GPU stream's engine in a child process (scheduling/stream_process.py): its driver
    # thread then shares no interpreter lock with the request handling. Fed without HTTP the
    # stream read 110-137 requests/s at concurrency 64 where the server answered 69 (H100,
    # 2026-12-07); not yet measured as a server, so off. This process keeps its own engine's
    # networks (on the device, for cls=on requests, which run in the call). How many child
    # engines share the device (0: none, the stream runs here); each page goes to the one with
    # the fewest pages in hand (scheduling/stream_set.py)
    engine_process: int = 0

    def validate(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.max_batch_pages < 1:
            raise ValueError("max_batch_pages must be >= 1")
        if self.max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        if self.max_batch_ms < 0:
            raise ValueError("max_batch_ms must be >= 0")
        if self.queue_size < 1:
            raise ValueError("queue_size must be >= 1")
        if not 0 < self.admission_safety <= 1:
            raise ValueError("admission_safety must be in (0, 1]")
        if self.max_decoded_pages < 0:
            raise ValueError("max_decoded_pages must be >= 0 (0: automatic)")
        if self.max_inflight_upload_bytes < 1:
            raise ValueError("max_inflight_upload_bytes must be >= 1 (one upload is always "
                             "let in when none is held)")
        if self.request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be > 0")
        if self.max_upload_bytes < 1 or self.max_pixels < 1 or self.max_pdf_pages < 1:
            raise ValueError("upload, pixel and page limits must be >= 1")
        if self.header_timeout_s <= 0:
            raise ValueError("header_timeout_s must be > 0")
        if self.warmup_s < 0:
            raise ValueError("warmup_s must be >= 0")
        if self.decode_threads < 1:
            raise ValueError("decode_threads must be >= 1")
        if not 0 <= self.engine_process <= 8:
            raise ValueError("engine_process must be 0 (off) to 8 child engines")

    @property
    def engine_devices(self) -> list[str]:
        return list(self.devices) if self.devices else [self.engine.runtime.device] * self.workers

    @property
    def batching(self) -> bool:
        return self.max_batch_pages > 1
