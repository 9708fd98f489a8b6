"""Planning benchmark: what one micro-batch trigger costs the driver, for 8, 128 and 1,024 queues.

    python tests/benchmarks/bench_planning.py [--queues 8,128,1024] [--triggers 30] [--messages 64] [--dir DIR]

For each queue count it writes a store with one topic of that many queues (``--messages`` messages per
queue), opens the stream reader the ``rocketmq`` source gives Spark (local mode, the default
consumerGroup, so every trigger also commits the group's offsets) and times, per trigger:

  * latestOffset(start, ReadAllAvailable) — bounds of every queue, data-loss checks, the group commit;
  * partitions(start, end)                — the tasks of the batch;
  * reportLatestOffset()                  — what Spark asks after each trigger for its progress report;
  * trigger = latestOffset + partitions (wall clock); trigger cpu = this process's CPU time for all three
    calls (less sensitive to other load on the machine).

Between triggers a writer in this process appends a few messages to a few queues (not timed), so every
trigger plans a non-empty batch, as a busy stream does. The median and the 90th percentile over
``--triggers`` triggers are printed (after two warm-up triggers), and the batch reader's ``partitions()``
(one batch query plan, fresh reader each time) for comparison. No Spark session: the reader's methods are
called as Spark's planner process calls them. The goal (issue 12) is <= 100 ms per trigger at 1,024 queues.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql.streaming.datasource import ReadAllAvailable

from rocketstream.spark.batch import batch_reader
from rocketstream.spark.options import parse_options
from rocketstream.spark.schema import projection_for
from rocketstream.spark.stream import RocketMQStreamReader
from rocketstream.store import MessageStore

TOPIC = "PlanTopic"


def build(root: Path, queues: int, per_queue: int) -> None:
    with MessageStore.open(root, create=True) as store:
        store.create_topic(TOPIC, queues)
        for qid in range(queues):
            store.put_batch(TOPIC, qid, [b"x" * 100] * per_queue, tags="TagA")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


def bench(root: Path, queues: int, triggers: int, per_queue: int) -> dict[str, list[float]]:
    build(root, queues, per_queue)
    options = {"path": str(root), "topic": TOPIC, "startingOffsets": "earliest"}
    names = ("latestOffset", "partitions", "reportLatestOffset", "trigger", "trigger cpu", "batch partitions")
    times: dict[str, list[float]] = {name: [] for name in names}
    reader = RocketMQStreamReader(parse_options(options, streaming=True), projection_for(None))
    start = reader.initialOffset()
    writer = MessageStore.open(root)
    try:
        for i in range(triggers + 2):
            for k in range(4):   # a few queues get new messages
                writer.put_batch(TOPIC, (i * 4 + k) % queues, [b"y" * 100] * 8, tags="TagA")
            c0 = time.process_time()
            t0 = time.perf_counter()
            end = reader.latestOffset(start, ReadAllAvailable())
            t1 = time.perf_counter()
            tasks = reader.partitions(start, end)
            t2 = time.perf_counter()
            reader.reportLatestOffset()
            t3 = time.perf_counter()
            c3 = time.process_time()
            assert tasks, "every trigger plans a batch"
            if i >= 2:
                times["latestOffset"].append(t1 - t0)
                times["partitions"].append(t2 - t1)
                times["reportLatestOffset"].append(t3 - t2)
                times["trigger"].append(t2 - t0)
                times["trigger cpu"].append(c3 - c0)
            start = end
        reader.stop()
        for _ in range(max(3, triggers // 5)):
            t0 = time.perf_counter()
            batch = batch_reader(parse_options({"path": str(root), "topic": TOPIC}, streaming=False),
                                 projection_for(None))
            batch.partitions()
            times["batch partitions"].append(time.perf_counter() - t0)
    finally:
        writer.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", default="8,128,1024")
    ap.add_argument("--triggers", type=int, default=30)
    ap.add_argument("--messages", type=int, default=64, help="messages per queue before the first trigger")
    ap.add_argument("--dir", default=None, help="where the stores go (a temporary directory by default)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-planning-", dir=args.dir))
    try:
        print(f"{'queues':>7} {'what':<20} {'median ms':>9} {'p90 ms':>8}")
        for n in (int(q) for q in args.queues.split(",")):
            times = bench(base / f"q{n}", n, args.triggers, args.messages)
            for what, values in times.items():
                p90 = sorted(values)[int(len(values) * 0.9) - 1 if len(values) > 1 else 0]
                print(f"{n:>7} {what:<20} {ms(statistics.median(values))} {ms(p90)}")
            shutil.rmtree(base / f"q{n}", ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
