"""RELIABILITY (client): one consumer of a group of three killed with SIGKILL mid-stream.

Three tests/reliability/client_consumer.py processes (our PushConsumer; concurrent, or orderly) share one group
on an 8-queue topic. Once their allocation is stable, our Producer (in this process) sends ``b"<queue>:<seq>:"``
bodies round-robin over the queues at a steady rate; at a random moment one member is SIGKILLed. Checked:

* takeover: the survivors hold every queue of the killed member (a live ProcessQueue) within one rebalance
  interval (20 s) of the kill — for orderly consumption within the broker's lock expiry (60 s, both brokers:
  locks are not released when a connection closes) plus one rebalance interval;
* every acknowledged message is consumed at least once;
* duplicates come only from the uncommitted window: the killed member's last 5 s (offset persist interval) +
  2 s, or a queue handed between live members by the rebalance; counted and reported;
* orderly: per queue, each member's deliveries are contiguous and increasing, a handoff never skips a
  sequence number, and no queue's deliveries alternate between members (never two owners at once).

    pytest tests/reliability/test_client_kill.py                 # 1 concurrent trial, our broker
    pytest -m slow -s tests/reliability/test_client_kill.py      # 10 trials each
    ROCKETSTREAM_CLIENT_KILL_BROKERS=ours,java ROCKETSTREAM_KILL_TRIALS=10 pytest -m slow -s ...
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from tests.broker import java_fixtures
from tests.client.interop_peers import client_api, create_topic, require_java
from tests.reliability.client_reliutil import (
    LOCK_MAX_LIVE_S,
    REBALANCE_INTERVAL_S,
    Member,
    SeqProducer,
    analyse,
    wait_consumed,
    wait_stable,
)

QUEUES = 8
TRIALS = int(os.environ.get("ROCKETSTREAM_KILL_TRIALS", "10"))
BROKERS = [b.strip() for b in os.environ.get("ROCKETSTREAM_CLIENT_KILL_BROKERS", "ours").split(",") if b.strip()]


@pytest.fixture(scope="module", params=BROKERS)
def kill_broker(request, tmp_path_factory):
    require_java()
    home = tmp_path_factory.mktemp(f"client-kill-{request.param}")
    target = java_fixtures._start_java(home) if request.param == "java" else java_fixtures.start_ours(home)
    try:
        yield target
    finally:
        java_fixtures.stop(target, clean=request.param == "ours")


def one_trial(api, target, home: Path, trial: int, *, orderly: bool, rng: random.Random) -> dict:
    kind = "ord" if orderly else "conc"
    topic, group = f"CK_{kind}_{trial}_{int(time.time()) % 100000}", f"CKG_{kind}_{trial}"
    create_topic(target, topic, QUEUES, order=False)
    home.mkdir(parents=True, exist_ok=True)
    members = [Member.start(f"m{i}", target.namesrv_addr, topic, group, home, orderly=orderly, work_ms=2)
               for i in range(3)]
    try:
        settle_s = wait_stable(members, QUEUES, timeout=90)
        rate, seconds = 300.0, 10.0
        prod = SeqProducer(api, target.namesrv_addr, topic, QUEUES, int(rate * seconds), rate)
        prod.start()
        time.sleep(rng.uniform(3.0, 6.0))
        victim = rng.choice(members)
        victim.kill()
        prod.join(seconds + 60)
        assert not prod.is_alive(), "the producer did not finish"
        survivors = [m for m in members if m is not victim]
        limit = (LOCK_MAX_LIVE_S if orderly else 0) + REBALANCE_INTERVAL_S + 5
        drained = wait_consumed(members, prod.acked, timeout=limit + 30)
        a = analyse(members, prod.acked, killed=victim, orderly=orderly)
        rec = {"trial": trial, "mode": kind, "broker": target.kind, "settle_s": round(settle_s, 1),
               "acked": len(prod.acked), "send_errors": len(prod.errors), "killed": victim.name,
               "killed_queues": a.extra["killed_queues"], "takeover_s": a.takeover_s,
               "drain_s": round(drained, 1), "deliveries": a.deliveries, "unique": a.unique,
               "duplicates": a.duplicates, "dup_killed_window": a.dup_killed_window, "dup_handoff": a.dup_handoff,
               "dup_other": a.dup_other, "missing": len(a.missing), "order_violations": a.order_violations}
        print("CLIENT-KILL " + json.dumps(rec), flush=True)
        assert not prod.errors, f"sends failed while only a consumer died: {prod.errors[:5]}"
        assert a.consumed_all, f"acknowledged but never consumed: {a.missing} — {rec}"
        late = {q: t for q, t in a.takeover_s.items() if t is None or t > limit}
        assert not late, f"queues of the killed member not taken over within {limit:.0f} s: {late} — {rec}"
        assert not a.dup_other, f"duplicates outside the uncommitted window: {a.dup_other} — {rec}"
        assert not a.order_violations, f"orderly violated: {a.order_violations} — {rec}"
        for m in survivors:
            assert m.proc.poll() is None, f"{m.name} died: {m.stderr_tail()}"
        return rec
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.stop()


def campaign(target, tmp_path: Path, *, orderly: bool, trials: int) -> list[dict]:
    api = client_api()
    rng = random.Random(20 + orderly)
    recs = [one_trial(api, target, tmp_path / f"t{i}", i, orderly=orderly, rng=rng) for i in range(trials)]
    dups = [r["duplicates"] for r in recs]
    takeovers = [t for r in recs for t in r["takeover_s"].values() if t is not None]
    print("CLIENT-KILL-SUMMARY " + json.dumps({
        "mode": "orderly" if orderly else "concurrent", "broker": target.kind, "trials": len(recs),
        "acked_total": sum(r["acked"] for r in recs), "duplicates_total": sum(dups), "duplicates_max": max(dups),
        "takeover_s_max": max(takeovers, default=None), "takeover_s_median": sorted(takeovers)[len(takeovers) // 2]
        if takeovers else None}), flush=True)
    return recs


def test_kill_one_of_three_concurrent(kill_broker, tmp_path) -> None:
    campaign(kill_broker, tmp_path, orderly=False, trials=1)


@pytest.mark.slow   # ~100 s: the killed member's broker locks expire after 60 s
def test_kill_one_of_three_orderly(kill_broker, tmp_path) -> None:
    campaign(kill_broker, tmp_path, orderly=True, trials=1)


@pytest.mark.slow
def test_kill_one_of_three_concurrent_campaign(kill_broker, tmp_path) -> None:
    campaign(kill_broker, tmp_path, orderly=False, trials=TRIALS)


@pytest.mark.slow
def test_kill_one_of_three_orderly_campaign(kill_broker, tmp_path) -> None:
    campaign(kill_broker, tmp_path, orderly=True, trials=TRIALS)
