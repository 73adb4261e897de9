"""`ocrforge serve`: the HTTP service (FastAPI + uvicorn) with dynamic batching."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ocrforge.cli import add_engine_options, devices_from_args, engine_config_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="run the HTTP OCR service (POST /v1/ocr, demo page at /)",
        description="HTTP OCR service with dynamic batching. Needs the 'serve' extra: "
        "pip install 'ocrforge[serve]'. See docs/SERVING.md.")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    p.add_argument("--workers", type=int, default=1,
                   help="engine replicas, one inference thread each (default 1)")
    p.add_argument("--devices", help="one engine per device, comma separated, e.g. cuda:0,cuda:1")
    b = p.add_argument_group("batching and limits")
    b.add_argument("--max-batch-pages", type=int, default=8,
                   help="pages merged into one engine call (default 8)")
    b.add_argument("--max-wait-ms", type=float, default=10.0,
                   help="how long the oldest queued page may wait for a batch to fill (default 10)")
    b.add_argument("--max-batch-ms", type=float, default=1000.0,
                   help="beyond its first page a batch takes pages only while its estimated "
                   "engine time stays within this (default 1000; big pages go one by one)")
    b.add_argument("--no-batching", action="store_true", help="one page per engine call")
    b.add_argument("--det-batch", type=int, help="pages per detection call inside a batch "
                   "(EngineConfig.det_batch_size; pages are padded to the largest)")
    b.add_argument("--queue-size", type=int, default=512,
                   help="pages admitted at once (decoding, queued, running); beyond: 429. "
                   "Requests are also refused (429) when the queued work would not let them "
                   "finish within --timeout (default 512)")
    b.add_argument("--max-decoded-pages", type=int, default=0,
                   help="decoded pages held in memory at once (default 0: two batches per engine)")
    b.add_argument("--max-inflight-mb", type=float, default=256.0,
                   help="upload megabytes held at once over all requests; beyond: 429 (default 256)")
    b.add_argument("--timeout", type=float, default=60.0, help="per-request timeout, s (504)")
    b.add_argument("--max-upload-mb", type=float, default=32.0, help="upload limit (413)")
    b.add_argument("--max-pixels", type=int, default=40_000_000,
                   help="pixels per page (decompression bombs: 422)")
    b.add_argument("--max-pdf-pages", type=int, default=50, help="pages per PDF (422)")
    b.add_argument("--dpi", type=int, help="PDF render resolution (default 200)")
    b.add_argument("--max-det-limit", type=int, default=4096,
                   help="largest det_limit a request may ask for (default 4096)")
    b.add_argument("--decode-threads", type=int, default=2, help="image/PDF decode threads")
    g = p.add_argument_group("access")
    g.add_argument("--api-key-file", metavar="FILE",
                   help="require the key in FILE (its first line) on every endpoint but "
                   "/healthz and /readyz; or set OCRFORGE_API_KEY")
    g.add_argument("--api-key", help="the key itself (shows in the process list: prefer "
                   "--api-key-file or OCRFORGE_API_KEY)")
    g.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a Host name the server answers to besides localhost and IP addresses "
                   "(repeat, or '*' for any); other names get 400 (DNS rebinding)")
    g.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a connection may take to send a request's headers (default 10)")
    b.add_argument("--no-warmup", action="store_true", help="skip the warm-up inference")
    b.add_argument("--warmup-s", type=float, default=120.0, metavar="S",
                   help="on a GPU: seconds at most spent before ready capturing the CUDA graphs "
                   "of the shapes requests will meet, most used first (default 120: the whole "
                   "plan; an H100 server was ready after 71-80 s; 0: only the warm-up page's)")
    b.add_argument("--engine-process", type=int, nargs="?", const=1, default=0, metavar="N",
                   help="with the GPU stream: run its engine in a child process (N: that many "
                   "child engines on the device, each page to the least busy), so its driver "
                   "thread shares no interpreter lock with request handling (not yet measured "
                   "as a server; fed without HTTP the stream read 1.6-2x what the server answered)")
    b.add_argument("--gpu-pipeline", action=argparse.BooleanOptionalAction, default=None,
                   help="runtime torch: every request's pages join one long-lived run of the "
                   "engine's GPU scheduler, which batches across requests (default: on for an "
                   "engine on CUDA, off on the CPU; off: each batch through engine.ocr_images)")
    b.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    b.add_argument("--no-access-log", action="store_true", help="no per-request log lines")
    add_engine_options(p)
    p.set_defaults(func=run)


def api_key_from_args(args: argparse.Namespace) -> str | None:
    """--api-key-file, else --api-key (with a warning: argv is world-readable), else the
    environment's OCRFORGE_API_KEY."""
    if args.api_key_file:
        try:
            lines = Path(args.api_key_file).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ValueError(f"--api-key-file {args.api_key_file}: {e.strerror}") from None
        key = lines[0].strip() if lines else ""
        if not key:
            raise ValueError(f"--api-key-file {args.api_key_file}: the file is empty")
        return key
    if args.api_key:
        print("ocrforge: warning: --api-key shows the key in the process list (ps, /proc); "
              "use --api-key-file FILE or OCRFORGE_API_KEY", file=sys.stderr)
        return args.api_key
    return os.environ.get("OCRFORGE_API_KEY") or None


def settings_from_args(args: argparse.Namespace):
    from ocrforge.server.settings import ServerSettings

    cfg = engine_config_from_args(args)
    if args.dpi:
        cfg = cfg.with_(pdf_dpi=args.dpi)
    if args.det_batch:
        cfg = cfg.with_(det_batch_size=args.det_batch)
    devices = [d.strip() for d in args.devices.split(",") if d.strip()] if args.devices else None
    if not devices and len(devices_from_args(args)) > 1:  # --device cuda:0,cuda:1 / --gpus N
        devices = devices_from_args(args)
    s = ServerSettings(
        engine=cfg,
        workers=args.workers,
        devices=devices,
        max_batch_pages=1 if args.no_batching else args.max_batch_pages,
        max_wait_ms=0.0 if args.no_batching else args.max_wait_ms,
        max_batch_ms=args.max_batch_ms,
        queue_size=args.queue_size,
        max_decoded_pages=args.max_decoded_pages,
        max_inflight_upload_bytes=int(args.max_inflight_mb * 1024 * 1024),
        request_timeout_s=args.timeout,
        max_upload_bytes=int(args.max_upload_mb * 1024 * 1024),
        max_pixels=args.max_pixels,
        max_pdf_pages=args.max_pdf_pages,
        max_det_limit=args.max_det_limit,
        decode_threads=args.decode_threads,
        api_key=api_key_from_args(args),
        allowed_hosts=[h for a in args.allow_host for h in a.split(",") if h.strip()],
        header_timeout_s=args.header_timeout,
        warmup=not args.no_warmup,
        warmup_s=args.warmup_s,
        gpu_pipeline=args.gpu_pipeline,
        engine_process=args.engine_process,
    )
    s.validate()
    return s


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ocrforge.server.app import create_app
        from ocrforge.server.guards import header_timeout_protocol
    except ImportError as e:
        print(f"ocrforge: error: serving needs the 'serve' extra ({e.name} is missing): "
              "pip install 'ocrforge[serve]'", file=sys.stderr)
        return 2
    from ocrforge.models.registry import resolve_models

    settings = settings_from_args(args)
    # fail fast on a wrong model set or folder; the engines themselves load after startup
    resolve_models(settings.engine.models.name, settings.engine.models.dir)
    app = create_app(settings)
    auth = "API key required" if settings.api_key else "no API key"
    print(f"ocrforge: serving on http://{args.host}:{args.port} ({auth}); demo page at /, "
          "API docs at /docs", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level,
                http=header_timeout_protocol(settings.header_timeout_s),
                access_log=not args.no_access_log,
                timeout_graceful_shutdown=int(settings.request_timeout_s) + 5)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m ocrforge.commands.serve ...`: the serve command alone, without the others."""
    parser = argparse.ArgumentParser(prog="ocrforge")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    try:
        return run(args)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"ocrforge: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
