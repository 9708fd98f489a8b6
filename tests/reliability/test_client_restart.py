"""RELIABILITY (client): our broker restarted under a running Python producer and PushConsumer.

``rocketstream namesrv`` and ``rocketstream broker`` run as separate processes (as in test_broker_kill.py), the
broker on a SYNC_FLUSH store. Our Producer (a thread here) sends ``b"<queue>:<seq>:"`` bodies round-robin over
4 queues and records every SEND_OK with its queue offset; one tests/reliability/client_consumer.py process (our
PushConsumer) logs every delivery. The broker is restarted on the same port and store, alternately with
SIGTERM (clean) and SIGKILL (crash). Checked: both clients carry on after every restart (acknowledgements and
deliveries after the last one), every acknowledged send is consumed, from the queue offset its SendResult named;
duplicates (at-least-once) and failed sends while the broker was down are counted and reported.

    pytest tests/reliability/test_client_restart.py                # 2 restarts
    pytest -m slow -s tests/reliability/test_client_restart.py     # 10 restarts
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.broker_admin import create_topic
from tests.client.interop_peers import client_api
from tests.realbroker import peers
from tests.reliability.client_reliutil import Member, SeqProducer, consumed_keys, dup_counter, env

QUEUES = 4


def _broker(store: Path, conf: Path, port: int, ns: str, log: Path) -> peers.Server:
    proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "broker", "--store", str(store), "--listen",
                         f"127.0.0.1:{port}", "--namesrv", ns, "--conf", str(conf)], env(), log)
    server = peers.Server("rocketstream broker", proc, log, port)
    server.wait_ready("boot success", timeout=60)
    return server


def campaign(tmp_path: Path, restarts: int) -> dict:
    api = client_api()
    rng = random.Random(5)
    ns_port, br_port = peers.free_port(), peers.free_port()
    ns = f"127.0.0.1:{ns_port}"
    ns_log = tmp_path / "namesrv.log"
    ns_proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "namesrv", "--listen", ns], env(), ns_log)
    peers.Server("rocketstream namesrv", ns_proc, ns_log, ns_port).wait_ready("boot success", timeout=60)
    store, conf = tmp_path / "store", tmp_path / "broker.conf"
    conf.write_text("brokerName=restart-a\nflushDiskType=SYNC_FLUSH\nmappedFileSizeCommitLog=4194304\n"
                    "autoCreateSubscriptionGroup=true\n")
    broker = _broker(store, conf, br_port, ns, tmp_path / "broker-0.log")
    topic, group = "RestartT", "RestartG"
    create_topic(f"127.0.0.1:{br_port}", topic, QUEUES)
    time.sleep(1)
    member = Member.start("consumer", ns, topic, group, tmp_path, orderly=False)
    prod = SeqProducer(api, ns, topic, QUEUES, 10**9, rate=100.0)
    prod.start()
    log: list[dict] = []
    try:
        for k in range(restarts):
            time.sleep(rng.uniform(3.0, 6.0))
            how = "SIGTERM" if k % 2 == 0 else "SIGKILL"
            acked_before = len(prod.acked)
            if how == "SIGTERM":
                broker.stop()
            else:
                broker.kill()
            down = rng.uniform(0.5, 2.0)
            time.sleep(down)
            t_up = time.time()
            broker = _broker(store, conf, br_port, ns, tmp_path / f"broker-{k + 1}.log")
            log.append({"restart": k + 1, "how": how, "down_s": round(down + time.time() - t_up, 1),
                        "acked_before": acked_before})
            print(f"restart {k + 1} ({how}): {acked_before} acknowledged so far", flush=True)
        acked_at_last = len(prod.acked)
        got_at_last = len(consumed_keys([member]))
        time.sleep(8)
        prod.stop_flag.set()
        prod.join(30)
        assert len(prod.acked) > acked_at_last, "the producer did not carry on after the last restart"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not set(prod.acked) <= consumed_keys([member]):
            time.sleep(0.5)
        gots = member.got()
        assert len(consumed_keys([member])) > got_at_last, "the consumer did not carry on after the last restart"
        missing = sorted(set(prod.acked) - consumed_keys([member]))
        at = {(g.queue, g.seq): g.offset for g in gots}
        wrong = [k for k, off in prod.acked.items() if k in at and at[k] != off]
        dups = sum(n - 1 for n in dup_counter([member]).values() if n > 1)
        rec = {"restarts": restarts, "acked": len(prod.acked), "send_errors": len(prod.errors),
               "deliveries": len(gots), "duplicates": dups, "missing": len(missing), "wrong_offset": len(wrong),
               "restarts_log": log}
        print("CLIENT-RESTART " + json.dumps(rec), flush=True)
        assert not missing, f"{len(missing)} acknowledged sends never consumed, e.g. {missing[:10]}"
        assert not wrong, f"delivered from another offset than acknowledged: {wrong[:10]}"
        assert member.proc.poll() is None, member.stderr_tail()
        return rec
    finally:
        prod.stop_flag.set()
        member.stop()
        broker.stop()
        ns_proc.terminate()
        try:
            ns_proc.wait(20)
        except subprocess.TimeoutExpired:
            ns_proc.kill()
        peers._forget(ns_proc)


@pytest.mark.slow  # the short version (2 restarts); kept out of the default run for time
def test_broker_restarts_under_python_clients(tmp_path) -> None:
    campaign(tmp_path, restarts=2)


@pytest.mark.slow
def test_broker_restarts_under_python_clients_campaign(tmp_path) -> None:
    campaign(tmp_path, restarts=10)
