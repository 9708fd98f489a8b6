"""The exactly-once sink (``exactlyOnce``) under SIGKILL, against our broker and the real 4.9.8 broker.

A streaming query in its own process (``main`` below: a JSON file source, one file per micro-batch, each row
``id`` written as one message with keys ``row-<id>``) runs with ``ROCKETSTREAM_SINK_KILL_AT`` naming the step
at which its driver kills itself (rocketstream/spark/exactly_once.py: ``before_commit``, ``after_intent``,
``mid_end``, ``after_end``, or ``task``: a task's Python worker dies after sending half its rows, Spark retries
the task). It is restarted from its checkpoint without the kill and runs to the end (Trigger.AvailableNow).
Then the real Java client (RealStorePeer read: every message of the topic) must see every input row exactly
once: 0 duplicates, 0 missing - after the broker's check-back had time to resolve the halves the killed
driver left (the brokers check every second here: transactionTimeOut / transactionCheckInterval 1000 ms).

Default run: one kill per broker (``after_intent``: the batch is recorded, nothing ended, the check-back
must commit it). The campaign (slow), per broker: one query killed at each driver kill point in turn (one
Spark start per kill), then a run whose tasks' first attempts are killed in ``ROCKETSTREAM_EOS_TASK_KILL_BATCHES``
batches (2 tasks each), so 4 + 8 = 12 kills per broker by default::

    pytest -m slow -s tests/reliability/test_sink_exactly_once_kills.py -k campaign
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.realbroker import peers  # noqa: E402

# check every second; 1000 checks: a check window (transactionCheckMax x transactionCheckInterval) of ~17 min, far
# longer than a restart of the query on a loaded machine (each check counts, answered or not)
TX_CONF = {"transactionCheckInterval": "1000", "transactionTimeOut": "1000", "transactionCheckMax": "1000",
           "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true", "flushDiskType": "ASYNC_FLUSH"}
KILL_POINTS = ("before_commit", "after_intent", "mid_end", "after_end", "task")
FILES, ROWS_PER_FILE = 2, 40   # two micro-batches: the default run kills in the second (after_intent@1)
DRIVER_KILLS = int(os.environ.get("ROCKETSTREAM_EOS_DRIVER_KILLS", "4"))   # per broker: each driver kill point
TASK_KILL_BATCHES = int(os.environ.get("ROCKETSTREAM_EOS_TASK_KILL_BATCHES", "4"))   # x 2 tasks each


# ---------------------------------------------------------------------------------------------- the job

def main() -> int:
    """``test_sink_exactly_once_kills.py <nameServer> <input dir> <checkpoint> <topic>``: the query, to the end."""
    namesrv, src, checkpoint, topic = sys.argv[1:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    log_conf = REPO / "conf" / "log4j2.properties"
    spark = (SparkSession.builder.master("local[2,4]").appName("rocketstream-eos")   # 4 attempts per task
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log_conf}")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from rocketstream.spark import register

    register(spark)
    frame = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(src) \
        .selectExpr("concat('row-', cast(id as string)) as keys", "cast(concat('body-', cast(id as string)) as binary) "
                    "as body").repartition(2)
    query = (frame.writeStream.format("rocketmq").option("nameServer", namesrv).option("topic", topic)
             .option("exactlyOnce", "true").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    print("FINISHED", flush=True)
    return 0


# ---------------------------------------------------------------------------------------------- helpers

class Broker:
    """A name server + broker with short transaction settings: ours (``rocketstream serve``) or 4.9.8."""

    def __init__(self, kind: str, home: Path) -> None:
        from tests.broker.conftest import start_serve

        self.kind = kind
        home.mkdir(parents=True, exist_ok=True)
        if kind == "ours":
            self.served = start_serve(home, conf=TX_CONF)
            self.namesrv_addr = self.served.namesrv_addr
        else:
            self.cluster = peers.Cluster(home, home / "store", dict(TX_CONF)).start()
            self.namesrv_addr = self.cluster.namesrv_addr

    def stop(self) -> None:
        from tests.broker.conftest import stop_serve

        if self.kind == "ours":
            stop_serve(self.served)
        else:
            self.cluster.stop(clean=False)


def write_input(src: Path, files: int = FILES, rows: int = ROWS_PER_FILE) -> int:
    src.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        (src / f"part-{f:04d}.json").write_text("".join(json.dumps({"id": f * rows + i}) + "\n"
                                                        for i in range(rows)))
    return files * rows


def run_job(namesrv: str, src: Path, checkpoint: Path, topic: str, log: Path, kill: str | None,
            timeout: float = 300) -> int:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("ROCKETSTREAM_SINK_KILL_AT", None)
    if kill:
        env["ROCKETSTREAM_SINK_KILL_AT"] = kill
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, __file__, namesrv, str(src), str(checkpoint), topic], env=env,
                                stdout=out, stderr=out, start_new_session=True)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            raise AssertionError(f"the query did not finish in {timeout:.0f} s:\n{log.read_text()[-3000:]}") \
                from None


def count_rows(classes: Path, namesrv: str, topic: str, home: Path) -> collections.Counter:
    out = home / f"oracle-{time.monotonic_ns()}.jsonl"
    peers.read_oracle(classes, namesrv, [topic], out, home)
    keys: collections.Counter = collections.Counter()
    for line in out.read_text().splitlines():
        o = json.loads(line)
        if o.get("kind") == "msg":
            keys[o["keys"]] += 1
    return keys


def settle(classes: Path, namesrv: str, topic: str, home: Path, n: int, deadline_s: float = 60) -> \
        tuple[int, int, collections.Counter]:
    """(duplicates, missing, counts) once every row is there (the check-back resolved the halves), or at the
    deadline; then once more a few check intervals later (nothing may arrive late)."""
    want = {f"row-{i}" for i in range(n)}
    deadline = time.monotonic() + deadline_s
    while True:
        got = count_rows(classes, namesrv, topic, home)
        if want <= set(got) or time.monotonic() > deadline:
            break
        time.sleep(1)
    time.sleep(3)   # three check intervals: a half wrongly committed late would show now
    got = count_rows(classes, namesrv, topic, home)
    dups = sum(c - 1 for c in got.values() if c > 1) + sum(c for k, c in got.items() if k not in want)
    missing = len(want - set(got))
    return dups, missing, got


def one_kill(broker: Broker, classes: Path, tmp: Path, kill: str, name: str) -> tuple[int, int]:
    src, checkpoint, topic = tmp / f"in-{name}", tmp / f"ckpt-{name}", f"Eos{name}"
    n = write_input(src)
    log = tmp / f"job-{name}.log"
    first = run_job(broker.namesrv_addr, src, checkpoint, topic, log, kill)
    if kill != "task":
        assert first != 0, f"the driver was to kill itself at {kill}:\n{log.read_text()[-3000:]}"
    second = run_job(broker.namesrv_addr, src, checkpoint, topic, log, None)
    assert second == 0, log.read_text()[-4000:]
    dups, missing, got = settle(classes, broker.namesrv_addr, topic, tmp, n)
    return dups, missing


@pytest.fixture(scope="module")
def peer_java(tmp_path_factory) -> Path:
    try:
        peers.find_java()
        peers.find_dist()
    except peers.JavaUnavailable as exc:
        pytest.skip(str(exc))
    return peers.compile_peer(tmp_path_factory.mktemp("eos-peer"))


# ---------------------------------------------------------------------------------------------- tests

# the default run's short version kills on our broker (about a minute: two Spark driver starts); the 4.9.8 one
# runs with the campaign (-m slow), which kills at every step on both brokers
@pytest.mark.parametrize("kind", ["ours", pytest.param("java", marks=pytest.mark.slow)])
def test_driver_killed_after_recording_the_intent(kind, tmp_path, peer_java):
    """Batch 1's record is written, then the driver dies before ending any half: after the restart the
    check-back commits exactly the recorded attempts' halves, and the re-run of batch 1 is rolled back."""
    broker = Broker(kind, tmp_path / "broker")
    try:
        dups, missing = one_kill(broker, peer_java, tmp_path, "after_intent@1", f"{kind}Intent")
    finally:
        broker.stop()
    assert (dups, missing) == (0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ours", "java"])
def test_kill_campaign(kind, tmp_path, peer_java):
    """One query, killed again and again: run i kills its driver at batch i (each driver kill point in turn,
    ``DRIVER_KILLS`` runs), the next run restarts it from the checkpoint (re-running batch i); the last run
    kills the first attempt of both tasks of each of ``TASK_KILL_BATCHES`` batches halfway through their rows
    (Spark retries them) and finishes. Then every input row is in the topic exactly once."""
    broker = Broker(kind, tmp_path / "broker")
    points = [p for p in KILL_POINTS if p != "task"]
    src, checkpoint, topic = tmp_path / "in", tmp_path / "ckpt", f"EosCampaign{kind}"
    n = write_input(src, files=DRIVER_KILLS + TASK_KILL_BATCHES + 1)
    log = tmp_path / "job.log"
    kills = []
    try:
        for i in range(DRIVER_KILLS):
            kill = f"{points[i % len(points)]}@{i}"
            code = run_job(broker.namesrv_addr, src, checkpoint, topic, log, kill)
            assert code != 0, f"run {i}: the driver was to kill itself at {kill}:\n{log.read_text()[-3000:]}"
            kills.append(kill)
            print(f"{kind}: killed the driver at {kill}", flush=True)
        last = ",".join(f"task@{b}" for b in range(DRIVER_KILLS, DRIVER_KILLS + TASK_KILL_BATCHES))
        code = run_job(broker.namesrv_addr, src, checkpoint, topic, log, last)
        assert code == 0, log.read_text()[-4000:]
        workers = log.read_text().count("killing this task's worker")
        dups, missing, _ = settle(peer_java, broker.namesrv_addr, topic, tmp_path, n)
    finally:
        broker.stop()
    print(f"{kind}: {len(kills)} driver kills ({', '.join(kills)}) + {workers} task workers killed "
          f"({last}), {n} rows: duplicates {dups}, missing {missing}", flush=True)
    print("RELIABILITY " + json.dumps({"item": "exactly-once sink kills", "broker": kind, "driver_kills": len(kills),
                                       "worker_kills": workers, "rows": n, "duplicates": dups,
                                       "missing": missing}), flush=True)
    assert workers >= TASK_KILL_BATCHES   # the hook did kill (each batch: the first attempt of its tasks)
    assert (dups, missing) == (0, 0)


if __name__ == "__main__":
    sys.exit(main())
