"""A real multi-node Ray cluster on one machine, started with the `ray start` CLI.

Every node is one `ray start --block` process in a session of its own; killing its process
group and the processes below it kills that whole node (raylet, object store, workers; on the
head also the GCS), and nothing else on the machine. RAY_TMPDIR points at a short private
folder, so the cluster's address file (which `ray.init()` and `--address auto` read) never
touches /tmp/ray.

Every Ray driver (an ocrforge job, a node count) runs in a Python process of its own
(``driver_env``, ``batch_argv``): Ray allows one driver connection per process, and a
``ray.init`` against another cluster in a process that held one (another test module's
in-process cluster, a Ray Client session) fails inside Ray with an AssertionError. The pytest
process itself never calls ``ray.init`` here, so no Ray state reaches other test modules.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))


def driver_env(ray_tmp: Path, **extra: str) -> dict[str, str]:
    """Environment of a driver process: this worktree's ``sys.path``, Ray's files under
    ``ray_tmp`` (never /tmp/ray), token auth off (see RayCluster), RAY_ADDRESS unset unless
    given in ``extra``."""
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("RAY_ADDRESS", None)
    env.update(extra)
    return env


def short_tmp() -> Path:
    """A fresh folder with a short path (Ray's Unix socket paths live under RAY_TMPDIR and a
    socket path has a 108-byte limit, which pytest's tmp_path can exceed)."""
    return Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))


def batch_argv(*args: str) -> list[str]:
    """``ocrforge batch ... --ray`` as a command of its own (its own Ray driver process)."""
    return [sys.executable, "-m", "ocrforge.cli", "batch", *args, "--ray", "--no-progress"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_ports() -> list[str]:
    """Ports of a node's own servers: the defaults (e.g. the dashboard agent's 52365) would
    collide between two nodes on one machine."""
    return [f"--{name}={free_port()}" for name in (
        "node-manager-port", "object-manager-port", "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port", "runtime-env-agent-port", "metrics-export-port")]


class RayNode:
    """One node: `ray start ... --block` in its own session (its pid is the group id)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path):
        self.log = log
        self._out = open(log, "ab")  # noqa: SIM115 (kept open while the node runs)
        self.proc = subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", *args],
                                     env=env, stdout=self._out, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the whole node at once, as a lost machine would: its process group and
        every process below it (the raylet starts its workers in process groups of their
        own, which would otherwise outlive it for a moment)."""
        import psutil

        if self.proc.poll() is None:
            try:
                below = psutil.Process(self.proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                below = []
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for p in below:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
        self.proc.wait(timeout=60)
        self._out.close()


class RayCluster:
    """A head with no CPUs (it hosts the GCS and the driver's 0-CPU tasks, never an OCR actor)
    and worker nodes with their own CPUs, fake GPUs and an ``ocr`` resource."""

    def __init__(self) -> None:
        # short: Ray's socket paths live under it (108-byte limit on a Unix socket path)
        self.tmp = short_tmp()
        # RAY_AUTH_MODE: Ray 2.60 turns token auth on for a `ray start` head when
        # ~/.ray/auth_token exists (any earlier local ray.init() writes one), and then refuses
        # drivers that join by address; the tests pin it off for every process
        self.env = {**os.environ, "RAY_TMPDIR": str(self.tmp), "RAY_AUTH_MODE": "disabled"}
        self.env.pop("RAY_ADDRESS", None)
        self.port, self.client_port = free_port(), free_port()
        self.head = RayNode(["--head", f"--port={self.port}", "--num-cpus=0", "--num-gpus=0",
                             "--include-dashboard=false", f"--ray-client-server-port={self.client_port}",
                             "--object-store-memory=80000000", *node_ports()],
                            self.env, self.tmp / "head.log")
        self.workers: list[RayNode] = []
        self.node_ids: list[str] = []  # the alive nodes when the last worker had joined
        self.address = self._wait_for_address()

    def _wait_for_address(self, timeout: float = 180) -> str:
        f = self.tmp / "ray" / "ray_current_cluster"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if f.is_file() and f.read_text().strip():
                return f.read_text().strip()
            if self.head.proc.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(f"Ray head did not start: {self.head.log.read_text()[-3000:]}")

    @property
    def host(self) -> str:
        return self.address.rsplit(":", 1)[0]

    @property
    def client_address(self) -> str:
        return f"ray://{self.host}:{self.client_port}"

    def add_worker(self, *, num_cpus: int = 1, num_gpus: int = 1) -> RayNode:
        """Start a worker node and wait until the cluster lists it (one at a time: two
        `ray start` of one machine started together can trip over each other; a node whose
        process ended before joining is started once more)."""
        before = 1 + len(self.workers)  # the head and the workers started so far
        for attempt in range(2):
            n = RayNode([f"--address={self.address}", f"--num-cpus={num_cpus}",
                         f"--num-gpus={num_gpus}", '--resources={"ocr": 1}',
                         "--object-store-memory=80000000", *node_ports()],
                        self.env, self.tmp / f"worker{len(self.workers)}-{attempt}.log")
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and n.proc.poll() is None:
                if len(nodes := self.alive_nodes(at_least=before + 1, within=15)) > before:
                    self.workers.append(n)
                    self.node_ids = nodes
                    return n
            n.kill()
        raise RuntimeError(f"Ray worker node did not join: {n.log.read_text()[-3000:]}")

    def alive_nodes(self, *, at_least: int = 0, within: float = 0) -> list[str]:
        """Ids of the alive nodes, asked by a driver process of its own, which waits up to
        ``within`` seconds for ``at_least`` of them ([] if it cannot join)."""
        code = (
            "import json, time, ray\n"
            f"ray.init(address={self.address!r}, logging_level='ERROR', log_to_driver=False)\n"
            f"deadline = time.monotonic() + {within}\n"
            "while True:\n"
            "    nodes = [n['NodeID'] for n in ray.nodes() if n['Alive']]\n"
            f"    if len(nodes) >= {at_least} or time.monotonic() > deadline:\n"
            "        break\n"
            "    time.sleep(0.5)\n"
            "print('NODES=' + json.dumps(nodes))\n")
        got = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True,
                             text=True, timeout=within + 180)
        if got.returncode != 0:
            return []
        lines = [ln for ln in got.stdout.splitlines() if ln.startswith("NODES=")]
        return json.loads(lines[-1][len("NODES="):]) if lines else []

    def shutdown(self) -> None:
        for n in [*self.workers, self.head]:
            n.kill()
