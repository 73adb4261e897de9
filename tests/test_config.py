"""EngineConfig: one typed, nested config; every way in parses through it."""

from __future__ import annotations

import json

import pytest

from ocrforge.config import (
    DET_LIMIT_BUCKETS,
    OPENVINO_REC_WIDTHS,
    ConfigError,
    EngineConfig,
    ReadOptions,
    bucket_det_limit,
    load_profile,
    save_profile,
)


def test_flat_dotted_and_section_keys_agree():
    a = EngineConfig.from_flat(det_limit_side=960, use_cls=True, rec_batch_size=8)
    b = EngineConfig().with_(**{"det.limit_side": 960, "cls.enabled": True, "rec.batch_size": 8})
    c = EngineConfig().with_(det={"limit_side": 960}, cls={"enabled": True}, rec={"batch_size": 8})
    assert a == b == c
    assert a.det.limit_side == 960 and a.cls.enabled and a.rec_batch() == 8


@pytest.mark.parametrize("changes, names", [
    ({"det_limit_sid": 960}, "det_limit_sid"),
    ({"det.limit_sid": 960}, "det.limit_sid"),
    ({"detx.limit_side": 960}, "detx"),
    ({"det_limit_side": "big"}, "det.limit_side"),
    ({"det_limit_side": 8}, "det.limit_side"),
    ({"drop_score": 1.5}, "rec.drop_score"),
    ({"device": "gpu"}, "runtime.device"),
])
def test_unknown_key_or_bad_value_names_the_key(changes, names):
    with pytest.raises(ConfigError) as e:
        EngineConfig().with_(**changes)
    assert names in str(e.value)


@pytest.mark.parametrize("changes, says", [
    ({"runtime": "onnxruntime", "device": "cuda"}, "runtime.backend torch"),
    ({"cuda_graphs": True}, "torch only"),
    ({"runtime": "torch", "rec_precision": "int8"}, "runtime.torch_precision"),
    ({"runtime": "torch", "cuda_graphs": True}, "device cuda"),
])
def test_knobs_that_cannot_apply_are_rejected(changes, says):
    with pytest.raises(ConfigError) as e:
        EngineConfig().with_(**changes)
    assert says in str(e.value)


def test_device_cuda_alone_means_the_gpu_engine():
    cfg = EngineConfig().with_(device="cuda:1")
    rt = cfg.runtime
    assert (rt.backend, rt.device, rt.torch_precision, rt.cuda_graphs) == ("torch", "cuda:1", "fp16", True)
    rt = EngineConfig().with_(device="cuda", torch_precision="fp32", cuda_graphs=False).runtime
    assert (rt.backend, rt.torch_precision, rt.cuda_graphs) == ("torch", "fp32", False)


def test_environment_variables_parse_through_the_config():
    env = {"OCRFORGE_DET__LIMIT_SIDE": "960", "OCRFORGE_RUNTIME__PROVIDERS": '["cpu"]',
           "OCRFORGE_CLS__ENABLED": "true", "OCRFORGE_MODEL_DIR": "/models", "OCRFORGE_API_KEY": "x"}
    cfg = EngineConfig.from_env(env)
    assert cfg.det.limit_side == 960 and cfg.cls.enabled and cfg.models.dir == "/models"
    with pytest.raises(ConfigError, match="det.limit_sid"):
        EngineConfig.from_env({"OCRFORGE_DET__LIMIT_SID": "960"})


def test_profiles_round_trip_and_accept_first_version_flat_files(tmp_path):
    cfg = EngineConfig.from_flat(det_limit_side=1280, rec_min_width=96)
    p = save_profile(cfg, tmp_path / "p.json", {"notes": "x"})
    assert load_profile(p) == cfg
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"config": {"det_limit_side": 1280, "rec_min_width": 96}}))
    assert load_profile(old) == cfg
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"config": {"det_limit": 1}}))
    with pytest.raises(ConfigError, match="bad.json.*det_limit"):
        load_profile(bad)


def test_read_options_bucket_the_detection_limit():
    assert bucket_det_limit(700) == 800 and bucket_det_limit(2048) == 2048
    assert bucket_det_limit(10_000) == DET_LIMIT_BUCKETS[-1]
    limits = {ReadOptions(det_limit_side=v).det_limit_bucket() for v in range(32, 4097, 37)}
    assert limits <= set(DET_LIMIT_BUCKETS)
    with pytest.raises(ValueError):
        ReadOptions(det_limit_side=5, drop_score=0.5)
    with pytest.raises(ValueError):
        ReadOptions(unknown=1)


def test_pipeline_default_follows_the_usable_cpus(monkeypatch):
    """pipeline.enabled None (the default): stages overlap above 2 usable CPUs only (on 2 they
    read slower than one page after the other, measured); an explicit value always wins."""
    from ocrforge.config import EngineConfig
    from ocrforge.runtimes import cpu_budget
    from ocrforge.scheduling import pipeline

    assert EngineConfig().pipeline.enabled is None
    for cpus, want in ((1, False), (2, False), (3, True), (16, True)):
        monkeypatch.setattr(cpu_budget, "usable_cpus", lambda cpus=cpus: cpus)
        assert pipeline.pipelined(None) is want
        assert pipeline.pipelined(True) is True and pipeline.pipelined(False) is False


def test_cpu_recognition_pads_short_lines_to_160_not_320(engine):
    """Short crops padded to the model's 320 px cost recognition time for nothing on the CPU:
    160 read 7-10 % more pages/s at +0.02-0.05 CER points (quiet 16-core host, 2 CPUs, tuning
    sets; docs/BENCHMARKS.md). The GPU's width buckets keep the model's width."""
    from ocrforge.config import EngineConfig

    assert engine.config.rec_min_width() == 160
    assert engine.runner.rec_prep.min_width == 160
    assert EngineConfig().with_(**{"rec.min_width": 320}).rec_min_width() == 320
    gpu = EngineConfig().with_(**{"runtime.backend": "torch", "runtime.device": "cuda"})
    assert gpu.rec_min_width() is None


def test_rec_widths_set_the_cpu_buckets(engine):
    from ocrforge import OCR

    eng = OCR(**{"rec.widths": [160, 224, 320, 448, 640]})
    prep = eng.runner.rec_prep
    assert prep.bucket(161) == 224 and prep.bucket(500) == 640
    step = OCR(**{"rec.widths": "step"}).runner.rec_prep
    assert step.bucket(161) == 192 and step.bucket(500) == 512  # multiples of rec.width_step
    on_openvino = engine.runner.rec_rt.name.startswith("openvino")
    assert engine.runner.rec_prep.bucket(161) == (224 if on_openvino else 192)


def test_rec_widths_auto_follow_the_runtime():
    cfg = EngineConfig()
    assert cfg.rec_cpu_widths("openvino[CPU,bf16]") == list(OPENVINO_REC_WIDTHS)
    assert cfg.rec_cpu_widths("onnxruntime[CPUExecutionProvider]") is None
    assert cfg.with_(**{"rec.widths": "step"}).rec_cpu_widths("openvino[CPU,bf16]") is None
    assert cfg.with_(**{"rec.widths": [320]}).rec_cpu_widths("onnxruntime") == [320]


def test_openvino_recognition_batches_the_last_lines_of_a_bucket_in_powers_of_two(engine):
    """A bucket's leftover lines go in batches of 8, 4, 2, 1 under OpenVINO (shapes that recur,
    whose kernels it keeps), in one batch elsewhere; every line is read once either way."""
    import numpy as np

    from ocrforge.stages.recognize import RecPreprocessor

    consts = engine.models.model_set.rec_constants
    crops = [np.zeros((48, 200, 3), np.uint8)] * 29  # 29 lines of one bucket
    sizes = [len(g) for _, g in RecPreprocessor(consts, pow2_tails=True).groups(crops, 16)]
    assert sizes == [16, 8, 4, 1]
    assert [len(g) for _, g in RecPreprocessor(consts).groups(crops, 16)] == [16, 13]
    got = [i for _, g in RecPreprocessor(consts, pow2_tails=True).groups(crops, 16) for i in g]
    assert got == list(range(29))
    on_openvino = engine.runner.rec_rt.name.startswith("openvino")
    assert engine.runner.rec_prep.pow2_tails == on_openvino
