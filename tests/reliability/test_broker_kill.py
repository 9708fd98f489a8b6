"""RELIABILITY row 9: our broker killed with SIGKILL while real Java producers and consumers run.

Our name server and our broker run as separate processes (``rocketstream namesrv`` /
``rocketstream broker``), the broker on a SYNC_FLUSH store. ``tests/java/KillPeer.java`` runs a
``DefaultMQProducer`` that logs every SEND_OK and a ``DefaultMQPushConsumer`` that logs every message
it is given. The broker is killed with SIGKILL at random moments and restarted on the same port and
store. Afterwards every message the producer saw SEND_OK for must be stored (at its queue offset) and
consumed; duplicates are allowed (at-least-once: offsets are committed every 5 s), losses are not.

    pytest -m slow -s tests/reliability/test_broker_kill.py            # 10 kills
    pytest -m slow -s tests/reliability/test_broker_kill.py -k short  # 2 kills
    ROCKETSTREAM_KILLS=3 pytest -m slow -s tests/reliability/test_broker_kill.py
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]
KILLS = int(os.environ.get("ROCKETSTREAM_KILLS", "10"))


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _compile(outdir: Path) -> Path:
    return peers.compile_java(outdir, REPO / "tests" / "java" / "KillPeer.java")


def _java(classes: Path, log: Path, *args: str) -> subprocess.Popen:
    dist = peers.find_dist()
    java, _ = peers.find_java()
    argv = [str(java), "-Xmx256m", "-XX:+UseSerialGC", "-Drocketmq.client.logUseSlf4j=false",
            "-Drocketmq.client.logRoot=" + str(log.parent / "rmqclient"),
            "-cp", f"{classes}:{dist}/lib/*", "KillPeer", *args]
    return peers._spawn(argv, dict(os.environ), log)


def _start_broker(store: Path, conf: Path, port: int, ns: str, log: Path) -> peers.Server:
    proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "broker", "--store", str(store), "--listen",
                         f"127.0.0.1:{port}", "--namesrv", ns, "--conf", str(conf)], _env(), log)
    server = peers.Server("rocketstream broker", proc, log, port)
    server.wait_ready("boot success", timeout=60)
    return server


def _lines(path: Path, tag: str) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.startswith(tag + " ")]


@pytest.mark.slow
def test_sigkilled_broker_loses_no_acknowledged_message(tmp_path: Path) -> None:
    _campaign(tmp_path, KILLS)


@pytest.mark.slow  # the short version (2 kills); kept out of the default run for time
def test_sigkilled_broker_loses_no_acknowledged_message_short(tmp_path: Path) -> None:
    """The default run's version: two kills."""
    _campaign(tmp_path, 2)


def _campaign(tmp_path: Path, kills: int) -> None:
    try:
        classes = _compile(tmp_path / "classes")
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    rng = random.Random(11)
    ns_port, br_port = peers.free_port(), peers.free_port()
    ns = f"127.0.0.1:{ns_port}"
    ns_log = tmp_path / "namesrv.log"
    ns_proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "namesrv", "--listen", ns], _env(), ns_log)
    peers.Server("rocketstream namesrv", ns_proc, ns_log, ns_port).wait_ready("boot success", timeout=60)
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=kill-a\nflushDiskType=SYNC_FLUSH\nmappedFileSizeCommitLog=4194304\n")
    broker = _start_broker(store, conf, br_port, ns, tmp_path / "broker-0.log")
    sent, got = tmp_path / "sent.txt", tmp_path / "got.txt"
    stop = tmp_path / "stop"
    consumer = _java(classes, tmp_path / "consumer.log", "consume", ns, "KillT", "kill-group", str(got))
    producer = _java(classes, tmp_path / "producer.log", "produce", ns, "KillT", str(sent), str(stop))
    try:
        for k in range(kills):
            time.sleep(rng.uniform(2.0, 5.0))
            acked = len(_lines(sent, "OK"))
            broker.kill()   # SIGKILL
            time.sleep(rng.uniform(0.2, 1.5))
            broker = _start_broker(store, conf, br_port, ns, tmp_path / f"broker-{k + 1}.log")
            print(f"kill {k + 1}: {acked} acknowledged so far", flush=True)
        time.sleep(3)
        stop.touch()
        assert producer.wait(60) == 0, peers._tail(tmp_path / "producer.log")
        ok = {line[1]: (int(line[2]), int(line[3])) for line in _lines(sent, "OK")}
        assert len(ok) > 100, "the producer hardly got through; see producer.log"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            seen = {line[1] for line in _lines(got, "GOT")}
            if set(ok) <= seen:
                break
            time.sleep(1)
        received = _lines(got, "GOT")
        seen_at = {(line[1], int(line[2]), int(line[3])) for line in received}
        missing = sorted(set(ok) - {line[1] for line in received})
        assert not missing, f"{len(missing)} acknowledged messages never consumed, e.g. {missing[:10]}"
        # each acknowledged message was delivered from the queue position its SendResult named
        wrong = [k for k, (q, off) in ok.items() if (k, q, off) not in seen_at]
        assert not wrong, f"delivered from another position than acknowledged: {wrong[:10]}"
        dups = sum(n - 1 for n in Counter(line[1] for line in received).values() if n > 1)
        print("RELIABILITY " + json.dumps({"item": "broker SIGKILL", "trials": kills, "acknowledged": len(ok),
                                           "deliveries": len(received), "duplicates": dups, "failures_found": 0}),
              flush=True)
    finally:
        stop.touch()
        for proc in (producer, consumer):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        broker.stop()
        ns_proc.send_signal(signal.SIGTERM)
        ns_proc.wait(20)
    res = subprocess.run([sys.executable, "-m", "rocketstream.cli", "check", "--store", str(store)],
                         env=_env(), capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
