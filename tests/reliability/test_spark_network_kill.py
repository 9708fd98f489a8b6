"""A streaming query over the network while its broker is killed with SIGKILL and restarted (issue 12).

``rocketstream namesrv`` and ``rocketstream broker`` run as separate processes. ``spark_net_producer.py``
sends self-describing messages (queue + sequence number in every body) through our Producer and logs
every acknowledged send with the queue offset its SendResult named. ``spark_stream_job.py`` reads the
topic in network mode (``nameServer``, ``consumerGroup``) into a parquet file sink with a checkpoint.
The broker is killed with SIGKILL while batches run and restarted on the same store and port. A query
that fails because its broker went away is restarted from its checkpoint, as a user (or a supervisor)
would; whether it failed or rode through is counted. After the producer is done, one clean
Trigger.AvailableNow run finishes the job. Then:

* exactly once: the sink's committed rows hold every message of the topic's queues ``[0, max)`` once —
  no duplicate (queueId, queueOffset), no gap — with the body the broker stored there;
* every acknowledged send is in the store (and so in the sink) at the offset its SendResult named, with its
  body (a send in flight at a kill may be stored twice: the producer retries it; both copies are rows);
* the broker's offset table for the group (QUERY_CONSUMER_OFFSET while it runs, and its
  config/consumerOffset.json after a clean stop) equals the end offsets of the checkpoint's last
  committed batch, and both equal the queues' max offsets.

    pytest -m slow -s tests/reliability/test_spark_network_kill.py              # 6 kills
    ROCKETSTREAM_SPARK_KILLS=2 pytest -m slow -s tests/reliability/test_spark_network_kill.py -k campaign
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest

from spark_reliutil import (
    TOPIC,
    checkpoint_committed_offsets,
    read_sink,
    spark_body,
    spawn_logged,
)
from tests.realbroker import peers

REPO = Path(__file__).resolve().parents[2]
KILLS = int(os.environ.get("ROCKETSTREAM_SPARK_KILLS", "6"))
GROUP = "relnet-group"
BROKER = "relnet-a"
QUEUES = 4


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _start_broker(store: Path, conf: Path, port: int, ns: str, log: Path) -> peers.Server:
    proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "broker", "--store", str(store), "--listen",
                         f"127.0.0.1:{port}", "--namesrv", ns, "--conf", str(conf)], _env(), log)
    server = peers.Server("rocketstream broker", proc, log, port)
    server.wait_ready("boot success", timeout=90)
    return server


def _admin(addr: str, code: int, fields: dict[str, object]):
    from rocketstream.remoting import RemotingCommand, connect

    async def go():
        ch = await connect(addr)
        try:
            return await ch.invoke(RemotingCommand.request(code, fields), 10)
        finally:
            ch.close()

    return asyncio.run(go())


def _broker_view(addr: str) -> tuple[dict[int, int], dict[int, int]]:
    """The queues' max offsets and the group's committed offsets, asked of the live broker."""
    from rocketstream.client.api import MQClientAPI

    async def ask():
        api = MQClientAPI(addr)
        try:
            maxes = [await api.max_offset(addr, TOPIC, q) for q in range(QUEUES)]
            committed = [await api.query_offset(addr, GROUP, TOPIC, q) for q in range(QUEUES)]
            return dict(enumerate(maxes)), {q: -1 if o is None else o for q, o in enumerate(committed)}
        finally:
            await api.close()

    return asyncio.run(ask())


# Spark's own start-up failing on the overloaded shared machine (PythonWorkerFactory's connect-back
# timeout), not the source: such a run is started again and counted, never a finding.
SPARK_START_TIMEOUT = "Python worker failed to connect back"


def _commits(checkpoint: Path) -> int:
    d = checkpoint / "commits"
    return len([p for p in d.iterdir() if p.name.isdigit()]) if d.is_dir() else 0


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def _stored(store: Path) -> dict[tuple[int, int], bytes]:
    from rocketstream.store import MessageStore

    rows: dict[tuple[int, int], bytes] = {}
    with MessageStore.open(store, read_only=True) as s:
        for q in s.queue_ids(TOPIC):
            for batch in s.read_range(TOPIC, q, s.min_offset(TOPIC, q), s.max_offset(TOPIC, q),
                                      columns=["queueOffset", "body"], check_crc=True):
                for off, body in zip(batch.column("queueOffset").to_pylist(), batch.column("body").to_pylist(),
                                     strict=True):
                    rows[(q, off)] = body
    return rows


def campaign(base: Path, kills: int, total: int, rate: float, seed: int = 5) -> dict:
    from rocketstream.remoting import RequestCode

    rnd = random.Random(seed)
    logs = base / "logs"
    logs.mkdir(parents=True)
    ns_port, br_port = peers.free_port(), peers.free_port()
    ns = f"127.0.0.1:{ns_port}"
    addr = f"127.0.0.1:{br_port}"
    ns_proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "namesrv", "--listen", ns], _env(),
                           logs / "namesrv.log")
    peers.Server("rocketstream namesrv", ns_proc, logs / "namesrv.log", ns_port).wait_ready("boot success", 60)
    store, conf = base / "store", base / "broker.conf"
    conf.write_text(f"brokerName={BROKER}\nmappedFileSizeCommitLog=4194304\nautoCreateSubscriptionGroup=true\n")
    ckpt, out = base / "ckpt", base / "out"
    acks, stop = base / "acks.txt", base / "stop"
    problems: list[str] = []
    outcomes: list[str] = []
    starts = spark_start_timeouts = 0
    broker = _start_broker(store, conf, br_port, ns, logs / "broker-0.log")
    producer = job = None
    try:
        resp = _admin(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": QUEUES, "writeQueueNums": QUEUES, "perm": 6,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False})
        assert resp.code == 0, resp.remark
        producer = spawn_logged("spark_net_producer.py", ns, BROKER, total, QUEUES, rate, acks, stop,
                                log=logs / "producer.log")

        def start_job() -> None:
            nonlocal job, starts
            job = spawn_logged("spark_stream_job.py", f"ns:{ns}", ckpt, out, "run", GROUP, 700,
                               log=logs / f"job{starts}.log")
            starts += 1

        def job_log() -> str:
            return (logs / f"job{starts - 1}.log").read_text(errors="replace")

        start_job()
        for k in range(kills):
            before = _commits(ckpt)
            deadline = time.monotonic() + 600
            while _commits(ckpt) <= before and time.monotonic() < deadline:
                if job.poll() is not None:   # failed without a kill: a finding (unless Spark failed to start)
                    if SPARK_START_TIMEOUT in job_log():
                        spark_start_timeouts += 1
                    else:
                        problems.append(f"before kill {k}: the query exited by itself (rc {job.returncode}); "
                                        f"see job{starts - 1}.log")
                    start_job()
                time.sleep(0.05)
            # right after a batch committed (planning the next one), or well into the next batch's reads
            time.sleep(rnd.uniform(0, 1.5) if k % 2 == 0 else rnd.uniform(3, 15))
            broker.kill()   # SIGKILL
            time.sleep(rnd.uniform(0.2, 1.5))
            broker = _start_broker(store, conf, br_port, ns, logs / f"broker-{k + 1}.log")
            time.sleep(3)   # a query that rode through has planned again by now
            if job.poll() is None:
                outcomes.append("rode through")
            else:
                text = job_log()
                failed = "QUERY FAILED" in text or "StreamingQueryException" in text
                outcomes.append("failed" if failed else f"exited rc {job.returncode}")
                start_job()
            print(f"kill {k + 1}: {_commits(ckpt)} batches committed, query {outcomes[-1]}", flush=True)
        stop.touch()
        if producer.wait(300) != 0:
            problems.append(f"producer failed: {(logs / 'producer.log').read_text()[-2000:]}")
        _kill_group(job)
        for attempt in range(3):
            final_log = logs / f"final{attempt}.log"
            final = spawn_logged("spark_stream_job.py", f"ns:{ns}", ckpt, out, "final", GROUP, 50_000, log=final_log)
            try:
                rc = final.wait(1800)
            except Exception:
                _kill_group(final)
                raise
            if rc != 0 and SPARK_START_TIMEOUT in final_log.read_text(errors="replace"):
                spark_start_timeouts += 1
                continue
            if rc != 0:
                problems.append(f"final AvailableNow run failed (rc {rc}): {final_log.read_text()[-3000:]}")
            break
        maxes, table = _broker_view(addr)
    finally:
        stop.touch()
        for proc in (producer, job):
            if proc is not None and proc.poll() is None:
                _kill_group(proc)
        broker.stop()   # SIGTERM: the broker persists its offset table
        ns_proc.send_signal(signal.SIGTERM)
        ns_proc.wait(30)

    committed = checkpoint_committed_offsets(ckpt) or {}
    ckpt_ends = {int(q): o for q, o in committed.get(TOPIC, {}).get(BROKER, {}).items()}
    if table != ckpt_ends:
        problems.append(f"broker table {table} (QUERY_CONSUMER_OFFSET) != checkpoint's last offsets {ckpt_ends}")
    if ckpt_ends != maxes:
        problems.append(f"checkpoint's last offsets {ckpt_ends} != queue max offsets {maxes}")
    from rocketstream.store.meta.offsets import ConsumerOffsetManager

    persisted = ConsumerOffsetManager(store, read_only=True).offsets_of(GROUP, TOPIC)
    if persisted != ckpt_ends:
        problems.append(f"consumerOffset.json after the broker's clean stop {persisted} != checkpoint {ckpt_ends}")

    stored = _stored(store)
    if sorted(stored) != sorted((q, o) for q, m in maxes.items() for o in range(m)):
        problems.append("the store does not hold exactly queue offsets [0, max) of every queue")
    sink = read_sink(out, ["queueId", "queueOffset", "body"])
    seen: dict[tuple[int, int], int] = {}
    wrong = 0
    for q, o, b in zip(*(sink.column(c).to_pylist() for c in ("queueId", "queueOffset", "body")), strict=True):
        seen[(q, o)] = seen.get((q, o), 0) + 1
        if stored.get((q, o)) != b:
            wrong += 1
    dups = sum(n - 1 for n in seen.values() if n > 1)
    missing = sorted(set(stored) - set(seen))
    extra = sorted(set(seen) - set(stored))
    for what, n, first in (("duplicated rows", dups, [k for k, n in seen.items() if n > 1][:5]),
                           ("stored messages missing from the sink", len(missing), missing[:5]),
                           ("sink rows the store does not hold", len(extra), extra[:5]),
                           ("rows whose body differs from the stored one", wrong, [])):
        if n:
            problems.append(f"{n} {what}, e.g. {first}")
    ok = [line.split() for line in acks.read_text().splitlines() if line.startswith("OK ")]
    bad_acks = [a for a in ok if stored.get((int(a[1]), int(a[2]))) != spark_body(int(a[1]), int(a[3]))]
    if bad_acks:
        problems.append(f"{len(bad_acks)} acknowledged sends not stored at their offset, e.g. {bad_acks[:5]}")
    retried = len(stored) - len(ok)
    figures = {"item": "spark-network-broker-kill", "kills": kills, "query_starts": starts,
               "outcomes": outcomes, "acknowledged": len(ok), "stored": len(stored), "sink_rows": len(sink),
               "stored_not_acknowledged": retried, "batches_committed": _commits(ckpt),
               "spark_start_timeouts": spark_start_timeouts,
               "failures_found": len(problems), "problems": problems}
    print("RELIABILITY " + json.dumps(figures), flush=True)
    return figures


@pytest.mark.slow
@pytest.mark.spark
def test_network_query_through_broker_kills(tmp_path: Path) -> None:
    figures = campaign(tmp_path, kills=KILLS, total=10_000_000, rate=150)
    assert figures["problems"] == []


@pytest.mark.slow   # two kills: every query restart is a Spark JVM start (20-60 s on the shared machine)
@pytest.mark.spark
def test_network_query_through_broker_kills_short(tmp_path: Path) -> None:
    figures = campaign(tmp_path, kills=2, total=10_000_000, rate=150)
    assert figures["problems"] == []
