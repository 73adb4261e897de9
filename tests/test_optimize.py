"""INT8 builds, the accuracy guard, the artifact cache and the generic model comparison.

Real ONNX Runtime quantization of the real models on a few synthetic pages; no mocks. Builds go
to a temporary cache (OCRFORGE_CACHE_DIR) so nothing leaks into the user's cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from ocrforge.config import EngineConfig


@pytest.fixture(scope="module")
def cache(tmp_path_factory, monkeypatch_module):
    d = tmp_path_factory.mktemp("ocrforge-cache")
    monkeypatch_module.setenv("OCRFORGE_CACHE_DIR", str(d))
    return d


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> Path:
    from ocrforge.evaluation.synth import generate

    return generate(tmp_path_factory.mktemp("synth"), 3, seed=7, kind="document", clean=True)


@pytest.fixture(scope="module")
def blank(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("blank")
    for i in range(2):
        cv2.imwrite(str(d / f"blank{i}.png"), np.full((900, 700, 3), 255, np.uint8))
    return d


def test_int8_det_build_is_guarded_cached_and_reused(cache, pages):
    from ocrforge.models.artifacts import artifact_path
    from ocrforge.models.registry import resolve_models
    from ocrforge.optimize.artifacts import BuildOptions, build
    from ocrforge.runtimes.onnxruntime import OrtRuntime

    cfg = EngineConfig()
    det = resolve_models(cfg.models.name).det
    # a 3-page guard is a coarse check; the budget here only has to hold real INT8 noise
    opts = BuildOptions(precision="int8", calibration=str(pages), calib_pages=3, eval=str(pages),
                        eval_pages=3, budget_points=2.0)
    res = build("det", det, opts, cfg, log=lambda s: None)
    assert res.path.is_file() and res.path.parent.parent == cache
    report = json.loads(res.path.with_suffix(".json").read_text())
    assert report["accepted"] is True
    g = report["guard"]
    assert g["pages"] == 3 and g["delta_points"] <= 2.0
    assert report["speed"]["fp32_s"] > 0 and report["speed"]["candidate_s"] > 0
    assert "3 det tensors" in report["calibration"]
    # the quantized graph really holds INT8 weights
    import onnx

    m = onnx.load(str(res.path))
    assert any(n.op_type == "DequantizeLinear" for n in m.graph.node)
    assert any(t.data_type == onnx.TensorProto.INT8 for t in m.graph.initializer)
    # the engine's lookup finds it (no second build) and it runs
    assert artifact_path("det", det, "int8", cfg.models.name) == res.path
    again = build("det", det, opts, cfg, log=lambda s: None)
    assert again.reused and again.path == res.path
    rt = OrtRuntime(res.path, cfg.runtime, "int8")
    out = rt.run(np.zeros((1, 3, 64, 64), np.float32))
    assert out.dtype == np.float32 and out.shape == (1, 1, 64, 64)


def test_guard_refuses_build_calibrated_on_blank_pages(cache, pages, blank):
    from ocrforge.models.registry import resolve_models
    from ocrforge.optimize.artifacts import BuildOptions, build, current_artifact
    from ocrforge.optimize.guard import BuildRefused

    cfg = EngineConfig()
    rec = resolve_models(cfg.models.name).rec
    det = resolve_models(cfg.models.name).det
    # blank pages give activation ranges of ~0: every real page saturates the INT8 detector
    opts = BuildOptions(precision="int8", calibration=str(blank), calib_pages=2, eval=str(pages),
                        eval_pages=3, budget_points=0.5)
    before = current_artifact("det", det, "int8")
    with pytest.raises(BuildRefused) as exc:
        build("det", det, opts, cfg, log=lambda s: None)
    rep = exc.value.report
    assert rep["accepted"] is False and rep["guard"]["delta_points"] > 0.5
    assert "refused" in str(exc.value) and "CER" in str(exc.value)
    refused = list((cache / "artifacts").glob("*.refused.json"))
    assert refused, "the refused build's numbers are kept"
    # the refused artifact never became the default
    assert current_artifact("det", det, "int8") == before
    assert rec.is_file()


def test_compare_models_fp16_and_int8_on_cls(cache):
    from ocrforge.models.registry import resolve_models
    from ocrforge.optimize.compare import compare_models, convert, make_inputs

    cls = resolve_models("ppocrv6-small").cls
    calib = make_inputs((2, 3, 48, 192), 4, seed=0)
    held = make_inputs((2, 3, 48, 192), 3, seed=1)
    fp16 = convert(cls, cache / "cls16.onnx", "fp16", calib)
    dyn = convert(cls, cache / "clsdyn.onnx", "int8-dynamic", calib)
    rep = compare_models(cls, {"fp16": fp16, "int8-dynamic": dyn}, held, repeats=1)
    v = rep["variants"]
    assert v["fp32"]["max_abs_err"] == 0.0 and v["fp32"]["cosine"] == pytest.approx(1.0)
    assert v["fp16"]["cosine"] > 0.999 and 0 < v["fp16"]["max_abs_err"] < 0.05
    assert v["int8-dynamic"]["cosine"] > 0.99
    assert all(r["ms_per_input"] > 0 for r in v.values())


def test_build_cli_generic_model_rejects_dynamic_shape_without_input_shape(cache, capsys):
    from ocrforge.cli import main
    from ocrforge.models.registry import resolve_models

    cls = resolve_models("ppocrv6-small").cls
    assert main(["build", "--model", str(cls), "--precision", "int8"]) == 2
    assert "--input-shape" in capsys.readouterr().err
