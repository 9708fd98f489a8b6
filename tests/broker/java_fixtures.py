"""A name server + broker for the Java-client scenario tests, and the runner for tests/java/BrokerScenarios.java.

The broker under test is OURS (``python -m rocketstream.cli serve`` as a subprocess on free 127.0.0.1 ports,
temporary store, a ``--conf`` file with short delay levels) unless ``ROCKETSTREAM_BROKER_TARGETS`` says
otherwise: a comma-separated list of ``ours`` and ``java`` (the real Apache RocketMQ 4.9.8 name server and
broker from ../shared/rocketmq-4.9.8, the oracle every scenario must pass against). Each target is one
parameter of the session fixture ``broker_target``, so ``ROCKETSTREAM_BROKER_TARGETS=java,ours`` runs every
test against both (test ids ``[java]`` / ``[ours]``).

Both brokers get the same settings (``SCENARIO_CONF``): delay levels 1 s, 2 s, 3 s, then 1 s, so that
retries (delay level 1) and the delay scenario are quick; ``enablePropertyFilter`` for SQL92 subscriptions.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]
SCENARIOS_SRC = REPO / "tests" / "java" / "BrokerScenarios.java"
TARGETS_ENV = "ROCKETSTREAM_BROKER_TARGETS"
SCENARIO_CONF = {
    "messageDelayLevel": "1s 2s 3s " + " ".join(["1s"] * 15),
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "flushDiskType": "ASYNC_FLUSH",
    "enablePropertyFilter": "true",   # SQL92 subscriptions (tests/client/test_sql92_brokers.py)
}


def targets() -> list[str]:
    raw = os.environ.get(TARGETS_ENV, "ours")
    names = [t.strip() for t in raw.split(",") if t.strip()]
    bad = [t for t in names if t not in ("ours", "java")]
    if bad or not names:
        raise ValueError(f"{TARGETS_ENV}={raw!r}: expected a comma-separated list of 'ours' and 'java'")
    return names


@dataclass
class BrokerTarget:
    """A running name server + broker: ``kind`` is "ours" or "java"."""
    kind: str
    home: Path
    namesrv_addr: str
    broker_addr: str
    cluster: str = "DefaultCluster"
    broker_name: str = "broker-a"
    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    start_s: float = 0.0

    def log_tail(self, n: int = 30) -> str:
        out = []
        for log in self.logs:
            try:
                lines = log.read_text(errors="replace").splitlines()[-n:]
            except OSError:
                lines = ["(no log)"]
            out.append(f"--- {log}\n" + "\n".join(lines))
        return "\n".join(out)


def _start_java(home: Path) -> BrokerTarget:
    t0 = time.monotonic()
    cluster = peers.Cluster(home, home / "store", dict(SCENARIO_CONF))
    cluster.start()
    assert cluster.namesrv is not None and cluster.broker is not None
    return BrokerTarget("java", home, cluster.namesrv_addr, f"{peers.BIND}:{cluster.broker.port}",
                        procs=[cluster.broker.proc, cluster.namesrv.proc],
                        logs=[cluster.broker.log, cluster.namesrv.log],
                        start_s=time.monotonic() - t0)


def start_ours(home: Path, conf: dict[str, str] | None = None) -> BrokerTarget:
    """``rocketstream serve`` (name server + broker in one process), ready when its broker logs "boot success"."""
    t0 = time.monotonic()
    home.mkdir(parents=True, exist_ok=True)
    conf_file = home / "broker.conf"
    conf_file.write_text("".join(f"{k}={v}\n" for k, v in (conf or SCENARIO_CONF).items()))
    port, ns_port = peers.free_port((0, 1)), peers.free_port()
    log = home / "rocketstream-serve.log"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("ROCKETSTREAM_CONF", None)
    proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "serve", "--store", str(home / "store"),
                         "--listen", f"{peers.BIND}:{port}", "--namesrv-listen", f"{peers.BIND}:{ns_port}",
                         "--conf", str(conf_file)], env, log)
    target = BrokerTarget("ours", home, f"{peers.BIND}:{ns_port}", f"{peers.BIND}:{port}", procs=[proc], logs=[log])
    while time.monotonic() - t0 < 60:
        lines = log.read_text(errors="replace").splitlines()
        if any("The broker[" in line and "boot success" in line for line in lines):
            target.start_s = time.monotonic() - t0
            return target
        if proc.poll() is not None:
            raise peers.PeerError(f"rocketstream serve exited with {proc.returncode} before 'boot success':\n"
                                  + target.log_tail())
        time.sleep(0.05)
    stop(target, clean=False)
    raise peers.PeerError("rocketstream serve not ready after 60 s:\n" + target.log_tail())


def stop(target: BrokerTarget, clean: bool = True) -> list[int | None]:
    """SIGTERM (clean) or SIGKILL every process; their exit statuses."""
    codes: list[int | None] = []
    for proc in target.procs:
        if proc.poll() is None:
            if clean:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            else:
                proc.kill()
                proc.wait()
        peers._forget(proc)
        codes.append(proc.returncode)
    return codes


def _require_java() -> None:
    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session", params=targets())
def broker_target(request):
    """The name server + broker under test (see the module docstring)."""
    _require_java()
    kind = request.param
    if kind == "ours" and importlib.util.find_spec("rocketstream.broker") is None:
        pytest.skip("rocketstream.broker is not built yet (run with ROCKETSTREAM_BROKER_TARGETS=java for the oracle)")
    # the session's shared brokers (tests/conftest.py: ``ours_broker`` / ``java_broker``, the two kinds of
    # ``mq_broker``): same settings; each scenario uses a topic and group of its own
    return request.getfixturevalue(f"{kind}_broker")


@pytest.fixture(scope="session")
def scenario_classes(tmp_path_factory) -> Path:
    """tests/java/BrokerScenarios.java compiled against the distribution's client jars (once per session)."""
    _require_java()
    return peers.compile_java(tmp_path_factory.mktemp("scenario-classes"), SCENARIOS_SRC)


@dataclass
class ScenarioRun:
    result: dict
    events: list[dict]
    returncode: int
    seconds: float
    stdout: str
    stderr: str

    def explain(self) -> str:
        return (f"exit {self.returncode} after {self.seconds:.1f} s; result: {json.dumps(self.result)[:3000]}\n"
                f"stderr tail:\n{self.stderr[-3000:]}")


def run_scenario(classes: Path, target: BrokerTarget, mode: str, topic: str, group: str, *opts: str,
                 timeout: float = 120.0) -> ScenarioRun:
    """Run one BrokerScenarios mode against ``target``; the parsed JSON lines (client logs go to a temp dir)."""
    java, _ = peers.find_java()
    home = target.home / "client"
    argv = [str(java), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dfile.encoding=UTF-8",
            f"-Duser.home={home}", f"-Drocketmq.client.logRoot={home}/logs",
            f"-Drocketmq.client.localOffsetStoreDir={home}/offsets",
            "-cp", f"{classes}:{peers.find_dist()}/lib/*", "BrokerScenarios", mode, target.namesrv_addr, topic, group,
            *opts, "--timeout-s", str(int(timeout * 0.6))]
    t0 = time.monotonic()
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"BrokerScenarios {mode} did not finish in {timeout:.0f} s:\n{exc.stdout!s:.3000}\n"
                             f"{target.log_tail()}") from None
    objs = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    results = [o for o in objs if "result" in o and "event" not in o]
    run = ScenarioRun(results[-1] if results else {}, [o for o in objs if "event" in o], res.returncode,
                      time.monotonic() - t0, res.stdout, res.stderr)
    if not results:
        raise AssertionError(f"BrokerScenarios {mode} printed no result:\n{run.explain()}\n{target.log_tail()}")
    return run


def assert_pass(run: ScenarioRun, target: BrokerTarget) -> dict:
    assert run.returncode == 0 and run.result.get("result") == "PASS", (
        f"{run.result.get('mode')} against {target.kind}: {run.result.get('failures')}\n{run.explain()}\n"
        f"{target.log_tail()}")
    return run.result
