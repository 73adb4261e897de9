"""`tune` never recommends a profile that is not better than the start by more than its
measured noise, and says so (issue 20, item 11).

Timings on a shared test machine mean nothing, so the measurement is replaced by a table of
times (what each configuration "took" in each run); the search and the decision are the real
code. Before the fix the winner of the search was written even when the final same-state check
showed it slower than the defaults (x0.99)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from ocrforge.config import EngineConfig
from ocrforge.tools import tune as tune_mod


def _fake_measure(times: dict[str, list[float]], cers: dict[str, float]):
    """measure() replacement: seconds per call from a per-config list (cycled), 10 pages."""
    calls: dict[str, int] = defaultdict(int)

    def key(cfg: EngineConfig) -> str:
        return "batch32" if cfg.rec.batch_size == 32 else "start"

    def measure(cfg, dataset, limit, repeat=1):
        k = key(cfg)
        seq = times[k]
        t = seq[calls[k] % len(seq)]
        calls[k] += 1
        return t, 10, cers[k]

    return measure


@pytest.mark.parametrize("case", ["within_noise", "clear_gain", "over_budget"])
def test_tune_recommends_only_a_gain_beyond_the_noise(case, monkeypatch):
    start_times = [1.00, 1.06, 0.96, 1.02]  # ~10 % spread between same-state runs
    if case == "within_noise":
        best_times = [0.97, 1.02, 0.99]  # "faster" in the search, not beyond the noise
    else:
        best_times = [0.60, 0.62, 0.61]
    cers = {"start": 0.010, "batch32": 0.010 if case != "over_budget" else 0.015}
    monkeypatch.setattr(tune_mod, "measure", _fake_measure(
        {"start": start_times, "batch32": best_times}, cers))
    logs: list[str] = []
    start = EngineConfig().with_(rec_batch_size=8)
    res = tune_mod.tune("unused", start, axes=["rec_batch_size"], budget_points=0.3,
                        log=logs.append)
    text = "\n".join(logs)
    if case == "clear_gain":
        assert res.best.rec.batch_size == 32
        assert res.verdict.startswith("recommended") and res.noise > 0
    else:
        assert res.best == start, "a profile not better than the start beyond noise was written"
        assert "keeps the starting configuration" in text
        assert case != "within_noise" or "warning" in text and "within the measured noise" in text
        assert res.summary()["verdict"] == res.verdict
