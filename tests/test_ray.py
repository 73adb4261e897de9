"""Ray Data backend on a simulated multi-node cluster (ray.cluster_utils.Cluster, one machine).

Skipped when Ray is not installed (pip install 'ocrforge[ray]'). Real engine, real Ray nodes
(separate raylet processes); one node is killed for real mid-job.
"""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from jobkit import ENGINE_KW, done_records, make_job_tree, read_outputs, temp_files

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from ray.cluster_utils import Cluster  # noqa: E402

from ocrforge.config import EngineConfig  # noqa: E402
from ocrforge.jobs import run_job  # noqa: E402
from ocrforge.ray import read_dataset  # noqa: E402

MB = 2**20
OCR_NODE = {"num_cpus": 1, "resources": {"ocr": 1}, "object_store_memory": 100 * MB}
ON_OCR_NODES = {"resources": {"ocr": 1}}  # actor_options: keep OCR actors off the head node


@pytest.fixture(scope="module")
def cluster():
    """Head (2 CPUs, 2 fake GPUs, the driver) + two 1-CPU worker nodes for OCR actors."""
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "num_gpus": 2, "object_store_memory": 100 * MB})
    workers = [c.add_node(**OCR_NODE) for _ in range(2)]
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c, workers
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def config():
    return EngineConfig().with_(**ENGINE_KW)


@pytest.fixture(scope="module")
def job200(tmp_path_factory, config):
    """A 200-page job (150-page PDF + 50 PNGs + 1 corrupt file) and its local result."""
    root = tmp_path_factory.mktemp("job200")
    src, n = make_job_tree(root, pdf_pages=150, pngs_per_folder=25)
    s = run_job([src], root / "local", config=config, progress=False)
    assert s.pages_read == n == 200 and len(s.failures) == 1
    return src, root / "local"


def test_two_nodes_give_the_local_result_and_resume(cluster, job200, config, tmp_path):
    src, local = job200
    out = tmp_path / "ray"
    s = read_dataset([src], out, num_actors=2, config=config, progress=False,
                     actor_options=ON_OCR_NODES)
    assert (s.pages_read, s.duplicates, len(s.failures)) == (200, 0, 1)
    assert "broken.png" in s.failures[0]["source"]
    nodes = {w["node_id"] for w in s.workers.values()}
    assert len(nodes) == 2 and all(w["pages"] > 0 for w in s.workers.values()), s.workers
    assert read_outputs(out) == read_outputs(local)
    assert set(done_records(out).values()) == {1}
    # the same job again reads nothing; a lost output file is read again
    (out / "book.pdf.p077.json").unlink()
    s = read_dataset([src], out, num_actors=2, config=config, progress=False,
                     actor_options=ON_OCR_NODES)
    assert (s.pages_read, s.pages_skipped) == (1, 199)
    assert read_outputs(out) == read_outputs(local)


def test_fake_gpus_one_per_actor_engine_stays_on_cpu(cluster, job200, config, tmp_path):
    src, local = job200
    out = tmp_path / "gpu"
    (out / "left").mkdir(parents=True)
    for p in (local / "left").glob("img00*"):  # a local job's output: Ray resumes it
        shutil.copy(p, out / "left" / p.name)
    shutil.copy(local / "manifest.jsonl", out)
    s = read_dataset([src / "left", src / "right"], out, num_actors=2, num_cpus_per_actor=1,
                     num_gpus_per_actor=1, config=config, progress=False)
    assert (s.pages_read, s.pages_skipped) == (40, 10)
    cuda = sorted(w["cuda_visible_devices"] for w in s.workers.values())
    assert cuda == ["0", "1"], s.workers  # Ray gave each actor its own (fake) GPU
    assert sorted(w["gpu_ids"][0] for w in s.workers.values()) == ["0", "1"]
    assert {w["device"] for w in s.workers.values()} == {"cpu"}  # from the config, not the env
    want = {k: v for k, v in read_outputs(local).items() if not k.startswith("book.pdf")}
    assert read_outputs(out) == want


def test_worker_node_killed_mid_job_every_page_once(cluster, job200, config, tmp_path):
    c, workers = cluster
    src, local = job200
    out = tmp_path / "killed"
    killed: list[int] = []

    def kill_a_node() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if (out / "manifest.jsonl").exists() and len(done_records(out)) >= 40:
                killed.append(len(done_records(out)))
                c.remove_node(workers[0], allow_graceful=False)
                return
            time.sleep(0.02)

    t = threading.Thread(target=kill_a_node, daemon=True)
    t.start()
    s = read_dataset([src], out, num_actors=2, config=config, progress=False,
                     actor_options=ON_OCR_NODES)
    t.join(5)
    workers[0] = c.add_node(**OCR_NODE)  # a replacement joins: the cluster is whole again
    assert killed and killed[0] < 200, "the node was not killed mid-job"
    assert s.pages_read == 200 and len(s.failures) == 1
    records = done_records(out)
    assert len(records) == 200 and set(records.values()) == {1}, "a page lost or written twice"
    assert read_outputs(out) == read_outputs(local)
    assert temp_files(out) == []


def test_reading_runs_in_few_worker_processes(cluster, config, tmp_path):
    """Reading and rendering reserve no CPU, so without a limit Ray ran one read task per
    input file at once, each in a new worker process (Ray's and ocrforge's imports: seconds
    of CPU each: 8 processes for 12 files). One actor gets one reader task at a time; it may
    run on any of the 3 nodes, and Ray ends a worker idle for a second on a node whose CPUs
    the actors hold, so a few processes, not one per file."""
    import psutil
    from conftest import render_lines

    src = tmp_path / "in"
    src.mkdir()
    for i in range(24):
        render_lines([f"reader {i}"], size=18, margin=8).image.save(src / f"r{i:02d}.png")
    readers: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for p in psutil.Process().children(recursive=True):
                try:
                    if "_pages_of_input" in p.name():
                        readers.add(p.pid)
                except psutil.Error:
                    pass
            time.sleep(0.02)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        s = read_dataset([src], tmp_path / "out", num_actors=1, config=config, progress=False,
                         actor_options=ON_OCR_NODES)
    finally:
        done.set()
        t.join(5)
    assert s.pages_read == 24 and not s.failures
    assert 1 <= len(readers) <= 6, f"{len(readers)} reader processes"
