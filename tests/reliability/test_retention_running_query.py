"""Item 7: commit-log files expire (retention with a reserved time of 0, tiny files) under a running
streaming query that is behind.

* failOnDataLoss=true: the query fails, and the message names the lost range — topic, broker, queue
  and the offsets [from, to) — exactly the range retention removed ahead of the query;
* failOnDataLoss=false: the loss is logged with the same range and the query goes on at the queue's
  new min offset: no duplicates, nothing re-read, every surviving message seen once in order.

The slow campaign keeps writing and expiring files *while* batches are planned and read (the window
between a batch's planning and its tasks reading is where retention can overtake a task).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path

import pytest

from spark_reliutil import TOPIC, spark_body

CL_FILE = 4096  # ~25 records per commit-log file
QUEUES = 2
_LOST = re.compile(r"messages \[(\d+), (\d+)\) of topic '([^']+)' on broker '([^']+)' queue (\d+) are gone")


class Writer:
    """The store's writer in this process: appends self-describing messages, expires files."""

    def __init__(self, root: Path) -> None:
        from rocketstream.store import MessageStore, StoreConfig

        self.store = MessageStore.open(root, create=True,
                                       config=StoreConfig(root, mapped_file_size_commit_log=CL_FILE))
        self.store.create_topic(TOPIC, QUEUES)
        self.next = {q: 0 for q in range(QUEUES)}

    def write(self, n: int) -> None:
        from rocketstream.store import Message

        for i in range(n):
            q = i % QUEUES
            self.store.put_message(Message(TOPIC, spark_body(q, self.next[q])[:120]), queue_id=q)
            self.next[q] += 1

    def expire(self) -> dict[int, int]:
        self.store.delete_expired_files(reserved_hours=0)
        return {q: self.store.min_offset(TOPIC, q) for q in range(QUEUES)}

    def max_offsets(self) -> dict[int, int]:
        return {q: self.store.max_offset(TOPIC, q) for q in range(QUEUES)}

    def close(self) -> None:
        self.store.close()


def _start(spark, root: Path, ckpt: Path, seen: list, fail: bool, per_trigger: int):  # noqa: F811
    def sink(df, batch_id):
        rows = [(r.queueId, r.queueOffset, bytes(r.body))
                for r in df.select("queueId", "queueOffset", "body").collect()]
        seen.append((batch_id, rows))

    return (spark.readStream.format("rocketmq").option("topic", TOPIC).option("startingOffsets", "earliest")
            .option("failOnDataLoss", str(fail).lower()).option("maxMessagesPerTrigger", str(per_trigger))
            .load(str(root)).writeStream.foreachBatch(sink).option("checkpointLocation", str(ckpt))
            .trigger(processingTime="0 seconds").start())


def _wait(cond, timeout: float, query=None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        if query is not None and not query.isActive:
            return cond()
        time.sleep(0.05)
    return False


def _failure(query, timeout: float) -> str:
    """The text of the error the query terminated with (awaitTermination raises it)."""
    try:
        finished = query.awaitTermination(timeout)
    except Exception as exc:  # noqa: BLE001 - the StreamingQueryException Spark surfaces
        return str(exc)
    return f"query {'ended without error' if finished else 'kept running over lost data'}"


def _positions(seen: list) -> dict[int, int]:
    """Next offset per queue after the batches seen so far."""
    pos: dict[int, int] = {}
    for _, rows in seen:
        for q, o, _ in rows:
            pos[q] = max(pos.get(q, 0), o + 1)
    return pos


def _check_rows(seen: list, maxes: dict[int, int], mins: dict[int, int]) -> list[str]:
    """Exactly once, in order, bodies intact; everything from the final min offsets on was read."""
    problems = []
    per_queue: dict[int, list[int]] = {}
    for _, rows in sorted(seen, key=lambda b: b[0]):
        for q, o, b in rows:
            per_queue.setdefault(q, []).append(o)
            if b != spark_body(q, o)[:120]:
                problems.append(f"queue {q} offset {o}: torn or wrong body")
    for q in range(QUEUES):
        offs = per_queue.get(q, [])
        if any(b <= a for a, b in zip(offs, offs[1:], strict=False)):
            problems.append(f"queue {q}: duplicated or out-of-order offsets")
        if not set(range(mins[q], maxes[q])) <= set(offs):
            problems.append(f"queue {q}: offsets of [{mins[q]}, {maxes[q]}) missing")
    return problems


@pytest.mark.spark
def test_fail_on_data_loss_true_names_the_lost_range(spark, tmp_path: Path) -> None:  # noqa: F811
    root, seen = tmp_path / "broker-a", []
    writer = Writer(root)
    try:
        writer.write(400)
        query = _start(spark, root, tmp_path / "ckpt", seen, True, 4)
        try:
            assert _wait(lambda: len(seen) >= 1, 120, query), "no first batch"
            writer.write(20)
            mins = writer.expire()
            error = _failure(query, 120)
        finally:
            query.stop()
    finally:
        writer.close()
    found = _LOST.search(error)
    assert found, error[:2000]
    lost_from, lost_to, topic, broker, qid = found.groups()
    assert (topic, broker) == (TOPIC, "broker-a")
    # Retention deletes commit-log files one by one, oldest first; a planner that lists the store while
    # it runs sees an intermediate (but real) minimum, so the range may end at or before the final one.
    assert int(lost_from) == _positions(seen).get(int(qid), 0) < int(lost_to) <= mins[int(qid)]
    assert "failOnDataLoss" in error


@pytest.mark.spark
def test_fail_on_data_loss_false_skips_to_the_new_min_once(spark, tmp_path: Path) -> None:  # noqa: F811
    root, seen = tmp_path / "broker-a", []
    writer = Writer(root)
    try:
        writer.write(400)
        query = _start(spark, root, tmp_path / "ckpt", seen, False, 4)
        try:
            assert _wait(lambda: len(seen) >= 1, 120, query), "no first batch"
            writer.write(20)
            mins = writer.expire()
            maxes = writer.max_offsets()
            caught_up = lambda: _positions(seen) == maxes  # noqa: E731
            assert _wait(caught_up, 180, query), f"query did not catch up: {query.exception()}"
            assert query.exception() is None
        finally:
            query.stop()
    finally:
        writer.close()
    assert _check_rows(seen, maxes, mins) == []
    assert sum(len(rows) for _, rows in seen) < sum(maxes.values())  # something was really skipped


def test_lost_range_is_logged_when_skipping(tmp_path: Path, caplog) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from rocketstream.spark.options import parse_options
    from rocketstream.spark.schema import projection_for
    from rocketstream.spark.stream import RocketMQStreamReader

    writer = Writer(tmp_path / "broker-a")
    try:
        writer.write(200)
        mins = writer.expire()
    finally:
        writer.close()
    reader = RocketMQStreamReader(parse_options({"path": str(tmp_path / "broker-a"), "topic": TOPIC,
                                                 "failOnDataLoss": "false"}, streaming=True), projection_for(None))
    with caplog.at_level(logging.WARNING, logger="rocketstream.spark"):
        end = reader.latestOffset({TOPIC: {"broker-a": {"0": 0, "1": 0}}}, ReadAllAvailable())
    assert end == {TOPIC: {"broker-a": {"0": 100, "1": 100}}}
    logged = sorted(_LOST.search(r.getMessage()).groups() for r in caplog.records if _LOST.search(r.getMessage()))
    assert logged == [("0", str(mins[0]), TOPIC, "broker-a", "0"), ("0", str(mins[1]), TOPIC, "broker-a", "1")]


# ---- slow: retention racing the query --------------------------------------------------------------

def _race(spark, base: Path, seconds: float, fail: bool) -> dict:  # noqa: F811
    """Write and expire continuously while the query plans and reads; returns figures."""
    root, seen = base / "broker-a", []
    writer = Writer(root)
    stop = threading.Event()
    expirations, mins = 0, {q: 0 for q in range(QUEUES)}

    def churn():
        # keep expiring for a while, so retention also lands between a batch's planning and its tasks
        nonlocal expirations, mins
        until = time.monotonic() + seconds
        while time.monotonic() < until and not stop.is_set() and query.isActive:
            writer.write(30)
            mins = writer.expire()
            expirations += 1
            time.sleep(0.02)

    try:
        writer.write(200)
        query = _start(spark, root, base / "ckpt", seen, fail, 7)
        try:
            assert _wait(lambda: len(seen) >= 1, 120, query), "no first batch"
            thread = threading.Thread(target=churn)
            thread.start()
            thread.join()
            maxes = writer.max_offsets()
            if fail:
                error = _failure(query, 120)
                problems = [] if _LOST.search(error) else [f"failure without a lost range: {error[:1500]}"]
            else:
                _wait(lambda: _positions(seen) == maxes, 300, query)
                problems = [] if query.exception() is None else [f"query failed: {str(query.exception())[:1500]}"]
                problems += _check_rows(seen, maxes, mins)
        finally:
            stop.set()
            query.stop()
    finally:
        writer.close()
    figures = {"item": "7-retention-race", "failOnDataLoss": fail, "expirations": expirations,
               "batches": len(seen), "rows": sum(len(r) for _, r in seen), "problems": problems}
    print("RELIABILITY", figures, flush=True)
    return figures


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("trial", range(5))
def test_retention_races_a_lenient_query(spark, tmp_path: Path, trial: int) -> None:  # noqa: F811
    assert _race(spark, tmp_path, seconds=25, fail=False)["problems"] == []


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("trial", range(3))
def test_retention_races_a_strict_query(spark, tmp_path: Path, trial: int) -> None:  # noqa: F811
    assert _race(spark, tmp_path, seconds=25, fail=True)["problems"] == []


@pytest.mark.parametrize("fail", [True, False])
def test_retention_between_planning_and_reading(tmp_path: Path, fail: bool) -> None:
    """Regression: a task whose range retention removed after planning raised a bare StoreError
    (no broker name, and fatal even with failOnDataLoss=false)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from rocketstream.errors import DataLossError
    from rocketstream.spark.options import parse_options
    from rocketstream.spark.schema import projection_for
    from rocketstream.spark.stream import RocketMQStreamReader

    root = tmp_path / "broker-a"
    writer = Writer(root)
    try:
        writer.write(220)  # 11 files; the last holds offsets [100, 110) of each queue
        reader = RocketMQStreamReader(parse_options({"path": str(root), "topic": TOPIC, "failOnDataLoss": str(fail)},
                                                    streaming=True), projection_for(None))
        start = {TOPIC: {"broker-a": {"0": 0, "1": 0}}}
        tasks = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
        mins = writer.expire()  # every file but the last: the planned ranges [0, 110) partly survive
        assert all(0 < m < 110 for m in mins.values())
        if fail:
            with pytest.raises(DataLossError) as err:
                [b for t in tasks for b in reader.read(t)]
            assert _LOST.search(str(err.value)).groups()[2:] == (TOPIC, "broker-a", str(err.value.queue_id))
            return
        rows = [(q, o) for t in tasks for b in reader.read(t)
                for q, o in zip(b.column("queueId").to_pylist(), b.column("queueOffset").to_pylist(), strict=True)]
    finally:
        writer.close()
    assert sorted(rows) == [(q, o) for q in (0, 1) for o in range(mins[q], 110)]


def test_reader_opening_while_retention_deletes_the_oldest_file(tmp_path: Path, monkeypatch) -> None:
    """Regression (found by the race campaign): a read-only open listed a commit-log file, retention
    deleted it before it was mapped, and the open failed with 'cannot map file' (planPartitions died)."""
    from rocketstream.store import MessageStore
    from rocketstream.store.files.mapped_file import MappedFileQueue

    root = tmp_path / "broker-a"
    writer = Writer(root)
    try:
        writer.write(220)
        listed = sorted(p.name for p in (root / "commitlog").iterdir())
        real = MappedFileQueue._list_names

        def stale(self, **kw):  # the listing a reader made just before retention ran
            return listed if self.directory.name == "commitlog" else real(self, **kw)

        writer.expire()
        monkeypatch.setattr(MappedFileQueue, "_list_names", stale)
        with MessageStore.open(root, read_only=True) as store:
            assert store.commit_log_min_offset() == int(sorted(p.name for p in (root / "commitlog").iterdir())[0])
            low = store.min_offset(TOPIC, 0)
            batches = list(store.read_range(TOPIC, 0, low, store.max_offset(TOPIC, 0), columns=["queueOffset"]))
        assert sum(b.num_rows for b in batches) == 110 - low
    finally:
        writer.close()
