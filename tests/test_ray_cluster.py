"""Where fedcore's Ray cluster listens, and a real two-node cluster joined through ``address=``.

The loopback check looks at the sockets of the run's one local Ray cluster (``ray_cluster``, tests/conftest.py:
started by a RayExecutor that found no Ray running) while a run uses it. The two-node cluster is driven from a
child process: a driver joins one cluster per process. Nodes started here are stopped by their own process ids
(their session directory and GCS address), never with ``ray stop``, which stops every Ray on the machine.

    pytest tests/test_ray_cluster.py            # both (the two-node test takes about a minute)
"""
import importlib.util
import ipaddress
import json
import os
from pathlib import Path
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

from fedcore.errors import ConfigError

if importlib.util.find_spec("ray") is None or importlib.util.find_spec("psutil") is None:  # looked up, not imported
    pytest.skip("needs ray and psutil", allow_module_level=True)
import psutil  # noqa: E402

from fedcore.engine.ray_executor import RayExecutor  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

JOB = """
import json, sys
import torch
torch.set_num_threads(1)
from fedcore.builtin import AsyncSchedule, BufferedSchedule, SemiAsyncSchedule, UniformSync
from fedcore.runtime import Faults, ProfileAssignment, SimClock
from fedcore.testing import ContractFixture, run_tiny_pipeline

SCHEDULES = {
    "sync-deadline": lambda: UniformSync(deadline=0.012),  # watches (~18 ms per job) miss it, phones (~7 ms) make it
    "async": lambda: AsyncSchedule(concurrency=4),
    "buffered": lambda: BufferedSchedule(buffer_size=2, concurrency=4),
    "semi-async": lambda: SemiAsyncSchedule(mu=0.5, t_clk=0.005),
}

def job(name, executor=None):
    return run_tiny_pipeline([SCHEDULES[name]()], rounds=4, fixture=ContractFixture(num_clients=6), executor=executor,
                             clock=SimClock(),
                             profiles=ProfileAssignment(weights={"watch": 2, "phone": 2, "laptop": 2}),
                             faults=Faults(dropout_before=0.1, dropout_during=0.15, lost_upload=0.1))

def summary(result):
    return {"history": result.history.comparable(), "ledger": result.ledger.to_rows(),
            "model": {k: v.flatten().tolist() for k, v in result.model.state_dict().items()},
            "participation": {c: s.rounds_participated for c, s in result.run.client_states.items()}}
"""


def run_child(code: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})


def loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if getattr(ip, "ipv4_mapped", None) is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def test_bind_must_be_an_address_or_auto():
    with pytest.raises(ConfigError, match=r"RayExecutor.bind='everywhere' is not an IP address or 'auto'"):
        RayExecutor(bind="everywhere")


def listening_sockets() -> list[dict]:
    """Every socket listening in this process and its children (a local cluster's GCS, raylet, workers, agents)."""
    me = psutil.Process()
    seen = []
    for proc in [me, *me.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
            name = proc.name()
        except psutil.Error:
            continue
        seen.extend({"process": name, "address": c.laddr.ip, "port": c.laddr.port}
                    for c in conns if c.status == psutil.CONN_LISTEN)
    return seen


@pytest.mark.integration
def test_the_local_cluster_fedcore_starts_listens_on_loopback_only(ray_cluster):
    """The run's one local Ray cluster (``ray_cluster``: started in this process by a RayExecutor that found no
    Ray running, through ``ray_cluster.init_ray``) listens on loopback only: its sockets are listed while a Ray
    executor's run trains on it (actors included). ``fedcore sweep --ray``, the path that once called ``ray.init``
    on every interface, starts Ray through the same ``init_ray`` with the loopback default
    (tests/test_sweep.py::test_cells_on_ray_give_the_numbers_of_cells_run_here)."""
    from fedcore.builtin import AsyncSchedule
    from fedcore.testing import ContractFixture, run_tiny_pipeline

    seen: list[dict] = []

    def listening(row):
        if not seen:
            seen.extend(listening_sockets())

    run_tiny_pipeline([AsyncSchedule(concurrency=4)], rounds=2, fixture=ContractFixture(num_clients=4),
                      executor=RayExecutor(num_workers=1), on_round=listening)
    # Ray's servers are this process's children: this run's cluster is the one fedcore started here
    assert {"gcs_server", "raylet"} <= {s["process"] for s in seen}, seen
    exposed = [s for s in seen if not loopback(s["address"])]
    assert exposed == [], f"Ray sockets outside 127.0.0.0/8: {exposed}"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def stop_nodes(marks: list[str], roots: list[str]) -> None:
    """Kill the processes of the nodes this test started (and their children), by id, and remove their temp dirs.

    SIGKILL, not SIGTERM: the nodes hold nothing worth a graceful exit, and Ray's GCS, raylets and agents each
    take 10-15 s to exit on SIGTERM (the test waited 15 s for them on every run)."""
    me = psutil.Process()
    skip = {me.pid, *(p.pid for p in me.parents())}
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid in skip:
            continue
        line = " ".join(proc.info["cmdline"] or [])
        if any(m in line for m in marks):
            try:
                found += [proc, *proc.children(recursive=True)]
            except psutil.Error:
                found.append(proc)
    for proc in found:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(found, timeout=15)
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.integration
def test_a_two_node_cluster_on_loopback_gives_the_inline_history():
    """``ray start --head`` plus ``ray start --address=...``, one CPU and one temp dir each, joined by address=.

    The nodes take loopback addresses of their own (127.0.0.2 and 127.0.0.3: Ray swaps 127.0.0.1 for the
    machine's external address when a cluster may have several nodes) and a token (Ray's token
    authentication), so no other process can use them while they run.

    Every scheduler, with the virtual clock pricing each finished job, device profiles and every kind of fault,
    gives the inline executor's history, ledger, model and participation on it (this was also checked on a
    one-node cluster by tests/test_ray_executor.py; one Ray run per scheduler is enough, and this one spans
    two nodes)."""
    head_ip, worker_ip = "127.0.0.2", "127.0.0.3"
    try:
        port = free_port(head_ip)
    except OSError:
        pytest.skip("this machine does not route 127.0.0.2 to the loopback interface")
    roots = [tempfile.mkdtemp(prefix="fc-ray-head-"), tempfile.mkdtemp(prefix="fc-ray-node-")]
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    ray_cli = [sys.executable, "-m", "ray.scripts.scripts", "start", "--disable-usage-stats", "--num-cpus=1",
               "--include-log-monitor=false"]  # the runs log nothing to the driver
    address = f"{head_ip}:{port}"
    try:
        head = subprocess.run([*ray_cli, "--head", f"--node-ip-address={head_ip}", f"--port={port}",
                               f"--temp-dir={roots[0]}", "--include-dashboard=false"],
                              capture_output=True, text=True, timeout=180, env={**os.environ, **env})
        assert head.returncode == 0, head.stderr[-3000:]
        node = subprocess.run([*ray_cli, f"--address={address}", f"--node-ip-address={worker_ip}",
                               f"--temp-dir={roots[1]}"],
                              capture_output=True, text=True, timeout=180, env={**os.environ, **env})
        assert node.returncode == 0, node.stderr[-3000:]
        code = JOB + f"""
import ray
from fedcore.engine.ray_executor import RayExecutor
out = {{}}
executor = RayExecutor(num_workers=2, address={address!r}, keep_workers=True)  # two actors for the four runs
for name in SCHEDULES:
    result = job(name, executor)
    if not out:
        out["nodes"] = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    out[name] = summary(result)
print("RESULT" + json.dumps(out))
"""
        child = run_child(code, env=env, timeout=420)
        assert child.returncode == 0, child.stderr[-3000:]
        got = json.loads(child.stdout.split("RESULT", 1)[1])
    finally:
        stop_nodes([*roots, address], roots)
    # both nodes joined, each on its own loopback address; with one CPU each, the two actors (one CPU each)
    # run one per node
    assert got["nodes"] == [head_ip, worker_ip]
    namespace: dict = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    events = set()
    try:
        exec(JOB, namespace)
        for name in namespace["SCHEDULES"]:
            result = namespace["job"](name)
            inline = json.loads(json.dumps(namespace["summary"](result)))
            for part in ("history", "ledger", "model", "participation"):
                assert got[name][part] == inline[part], (name, part)
            events |= {k for r in result.history for k in ("dropout", "lost", "unavailable", "cancelled") if k in r}
    finally:
        torch.set_num_threads(threads)
    assert events == {"dropout", "lost", "unavailable", "cancelled"}  # every kind of fault was exercised
