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
    # admission: requests decoding, queued or running; beyond this -> 429
    queue_size: int = 64
    request_timeout_s: float = 60.0
    max_upload_bytes: int = 32 * 1024 * 1024
    max_pixels: int = 40_000_000
    max_pdf_pages: int = 50
    max_det_limit: int = 4096
    decode_threads: int = 2
    api_key: str | None = None
    warmup: bool = True
    # torch runtime on CUDA: run batches through the engine's streaming GPU pipeline instead of
    # ocr_images (off: measured on an H200, one GpuPipeline.run() per batch cost seconds)
    gpu_pipeline: bool = False

    def validate(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.max_batch_pages < 1:
            raise ValueError("max_batch_pages must be >= 1")
        if self.max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        if self.queue_size < 1:
            raise ValueError("queue_size must be >= 1")
        if self.request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be > 0")
        if self.max_upload_bytes < 1 or self.max_pixels < 1 or self.max_pdf_pages < 1:
            raise ValueError("upload, pixel and page limits must be >= 1")
        if self.decode_threads < 1:
            raise ValueError("decode_threads must be >= 1")

    @property
    def engine_devices(self) -> list[str]:
        return list(self.devices) if self.devices else [self.engine.runtime.device] * self.workers

    @property
    def batching(self) -> bool:
        return self.max_batch_pages > 1
