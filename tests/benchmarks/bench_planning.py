"""Planning benchmark: what one micro-batch trigger costs the driver, for 8, 128 and 1,024 queues.

    python tests/benchmarks/bench_planning.py [--queues 8,128,1024] [--triggers 30] [--messages 64] [--dir DIR]
                                              [--modes local,network] [--broker ours|java]
    python tests/benchmarks/bench_planning.py --tasks [--dir DIR]
    python tests/benchmarks/bench_planning.py --query [--queue-counts 8,1024] [--repeat 5] [--profile N] [--dir DIR]

``--query`` (issue 21, the 1,024-queue row): a whole batch query's CPU outside Spark, as PySpark runs it — the
reader pickled (cloudpickle) before ``partitions()``, which runs in the planner; each task's partition pickled,
then, per task, the reader and partition unpickled and ``read()`` drained — over one topic of each
``--queue-counts`` queues holding one 100-byte message each. Prints this process's CPU ms for the plan, for the
tasks (all of them), their sum (best of ``--repeat``, fresh reader each time), the pickled size of a partition,
and the sum's difference from the first queue count's. ``--profile N``: cProfile of the query at N queues
(top 40 by cumulative time, after a warm-up query).

``--tasks`` (issue 21): the tasks a batch query gets, and the driver's planning time, for the issue's reads —
1 M x 256 B and 100 k x 4 KiB over 8 queues (stores written for the run, 1 % of the messages tagged
``TagRare``), their 1 % tag scans, 1,024 queues x 1 message, and 10 GiB over 8 queues (planning maths only, from
the ranges' message counts and bytes: no 10 GiB store is written) — by message counts (``plan_default``, the
plan of main before issue 21; what ``plan_tasks`` still does without views) and by bytes
(``plan_by_bytes`` with the consume queue's sizes, what the batch reader now plans). Times are this process's
CPU time for ``partitions()`` (best of 3).

For each queue count and mode it makes one topic of that many queues (``--messages`` messages per queue),
opens the stream reader the ``rocketmq`` source gives Spark (the default consumerGroup, so every trigger
also commits the group's offsets) and times, per trigger:

* ``local``: a store directory written in this process (``path``); the group commit rewrites the store's
  config/consumerOffset.json.
* ``network``: a broker started for the run (``--broker ours``: ``rocketstream serve``; ``java``: the real
  Apache RocketMQ 4.9.8 name server and broker from ../shared/rocketmq-4.9.8), read with ``nameServer``;
  the queues' bounds and the group commit are requests to the broker. Messages are sent with our Producer.

  * latestOffset(start, ReadAllAvailable) — bounds of every queue, data-loss checks, the group commit;
  * partitions(start, end)                — the tasks of the batch;
  * reportLatestOffset()                  — what Spark asks after each trigger for its progress report;
  * trigger = latestOffset + partitions (wall clock); trigger cpu = this process's CPU time for all three
    calls (less sensitive to other load on the machine).

Between triggers a writer (a store writer in this process, or our Producer) appends a few messages to a
few queues (not timed), so every
trigger plans a non-empty batch, as a busy stream does. The median and the 90th percentile over
``--triggers`` triggers are printed (after two warm-up triggers), and the batch reader's ``partitions()``
(one batch query plan, fresh reader each time) for comparison. No Spark session: the reader's methods are
called as Spark's planner process calls them, with the offsets passed through ``json.dumps``/``json.loads``
as Spark's checkpoint does. The goal (issue 12) is <= 100 ms per trigger at 1,024 queues.
"""

from __future__ import annotations

import argparse
import json
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
from tests.broker_admin import create_topic

TOPIC = "PlanTopic"
GROUP = "PlanGroup"
REPO = Path(__file__).resolve().parents[2]


def build(root: Path, queues: int, per_queue: int) -> None:
    with MessageStore.open(root, create=True) as store:
        store.create_topic(TOPIC, queues)
        for qid in range(queues):
            store.put_batch(TOPIC, qid, [b"x" * 100] * per_queue, tags="TagA")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


class LocalWriter:
    def __init__(self, root: Path, queues: int, per_queue: int) -> None:
        build(root, queues, per_queue)
        self.store = MessageStore.open(root)
        self.options = {"path": str(root), "topic": TOPIC, "startingOffsets": "earliest"}
        self.batch_options = {"path": str(root), "topic": TOPIC}

    def put(self, queue_id: int, n: int) -> None:
        self.store.put_batch(TOPIC, queue_id, [b"y" * 100] * n, tags="TagA")

    def close(self) -> None:
        self.store.close()


class NetworkWriter:
    """A broker for the run, the topic created on it with ``queues`` queues, filled with our Producer."""

    def __init__(self, home: Path, queues: int, per_queue: int, broker: str) -> None:
        import sys

        sys.path.insert(0, str(REPO))
        from rocketstream.client.allocate import MessageQueue
        from rocketstream.client.producer import Producer
        from tests.broker import java_fixtures

        self._java_fixtures = java_fixtures
        self.target = java_fixtures._start_java(home) if broker == "java" else java_fixtures.start_ours(home)
        try:
            create_topic(self.target.broker_addr, TOPIC, queues)
            self.producer = Producer("PlanProducer", namesrv=self.target.namesrv_addr).start()
            self._mq = lambda qid: MessageQueue(TOPIC, self.target.broker_name, qid)
            deadline = time.monotonic() + 30
            while True:   # the name server learns the topic with the broker's next registration
                try:
                    self.put(0, per_queue)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            for qid in range(1, queues):
                self.put(qid, per_queue)
        except BaseException:
            self.close()
            raise
        ns = self.target.namesrv_addr
        self.options = {"nameServer": ns, "topic": TOPIC, "startingOffsets": "earliest", "consumerGroup": GROUP}
        self.batch_options = {"nameServer": ns, "topic": TOPIC, "consumerGroup": GROUP}

    def put(self, queue_id: int, n: int) -> None:
        self.producer.send_batch(TOPIC, [b"y" * 100] * n, tags="TagA", queue=self._mq(queue_id), timeout=30)

    def close(self) -> None:
        producer = getattr(self, "producer", None)
        if producer is not None:
            producer.shutdown()
        self._java_fixtures.stop(self.target, clean=False)


def bench(root: Path, queues: int, triggers: int, per_queue: int, mode: str = "local",
          broker: str = "ours") -> dict[str, list[float]]:
    writer = LocalWriter(root, queues, per_queue) if mode == "local" else NetworkWriter(root, queues, per_queue,
                                                                                         broker)
    names = ("latestOffset", "partitions", "reportLatestOffset", "trigger", "trigger cpu", "batch partitions")
    times: dict[str, list[float]] = {name: [] for name in names}
    try:
        reader = RocketMQStreamReader(parse_options(writer.options, streaming=True), projection_for(None))
        start = json.loads(json.dumps(reader.initialOffset()))
        for i in range(triggers + 2):
            for k in range(4):   # a few queues get new messages
                writer.put((i * 4 + k) % queues, 8)
            c0 = time.process_time()
            t0 = time.perf_counter()
            end = json.loads(json.dumps(reader.latestOffset(start, ReadAllAvailable())))  # Spark's checkpoint
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
            batch = batch_reader(parse_options(writer.batch_options, streaming=False), projection_for(None))
            batch.partitions()
            times["batch partitions"].append(time.perf_counter() - t0)
    finally:
        writer.close()
    return times


def build_sized(root: Path, queues: int, per_queue: int, body: int) -> None:
    """``per_queue`` messages of ``body`` bytes in each queue, every 100th tagged TagRare."""
    with MessageStore.open(root, create=True) as store:
        store.create_topic(TOPIC, queues)
        tags = ["TagRare" if i % 100 == 0 else "TagCommon" for i in range(min(per_queue, 4096))]
        for qid in range(queues):
            for at in range(0, per_queue, 4096):
                n = min(4096, per_queue - at)
                store.put_batch(TOPIC, qid, [b"x" * body] * n, tags=tags[:n])


def task_counts(base: Path) -> None:
    from rocketstream.spark import tasks as tasks_mod
    from rocketstream.spark.offset_ranges import OffsetRange, QueueKey, plan_by_bytes, plan_default

    print(f"{'read':<34} {'by messages':>12} {'by bytes':>9} {'cpu ms (messages)':>18} {'cpu ms (bytes)':>15}")

    def planned(options: dict[str, str], *, with_views: bool) -> tuple[int, float]:
        real = tasks_mod.plan_tasks

        def without_views(*a, **kw):  # main's plan: message counts only
            kw.pop("views", None)
            return real(*a, **kw)

        best, n = float("inf"), 0
        for _ in range(3):
            if not with_views:
                tasks_mod.plan_tasks = without_views
            try:
                import rocketstream.spark.batch as batch_mod

                batch_mod.plan_tasks = tasks_mod.plan_tasks
                c0 = time.process_time()
                n = len(batch_reader(parse_options(options, streaming=False), projection_for(None)).partitions())
                best = min(best, time.process_time() - c0)
            finally:
                tasks_mod.plan_tasks = real
                batch_mod.plan_tasks = real
        return n, best

    for name, queues, per_queue, body in (("1 M x 256 B, 8 queues", 8, 125_000, 256),
                                          ("100 k x 4 KiB, 8 queues", 8, 12_500, 4096),
                                          ("1,024 queues x 1 message", 1024, 1, 100)):
        root = base / f"tasks-{queues}-{per_queue}-{body}"
        t0 = time.perf_counter()
        build_sized(root, queues, per_queue, body)
        print(f"  ({name}: store written in {time.perf_counter() - t0:.1f} s)", flush=True)
        for label, extra in (("", {}), (", tag 1 %", {"subExpression": "TagRare"})):
            if queues > 8 and extra:
                continue
            options = {"path": str(root), "topic": TOPIC, **extra}
            n_old, t_old = planned(options, with_views=False)
            n_new, t_new = planned(options, with_views=True)
            print(f"{name + label:<34} {n_old:>12} {n_new:>9} {ms(t_old):>18} {ms(t_new):>15}", flush=True)
        shutil.rmtree(root, ignore_errors=True)
    for name, per_queue, body in (("10 GiB, 256 B, 8 queues (maths)", 5_242_880, 256),
                                  ("10 GiB, 4 KiB, 8 queues (maths)", 327_680, 4096)):
        ranges = [OffsetRange(QueueKey(TOPIC, "broker-a", i), 0, per_queue) for i in range(8)]
        stored = [per_queue * (body + 150)] * 8   # ~150 header bytes a record
        c0 = time.process_time()
        old = plan_default(ranges)
        c1 = time.process_time()
        new = plan_by_bytes(ranges, stored)
        c2 = time.process_time()
        print(f"{name:<34} {len(old):>12} {len(new):>9} {ms(c1 - c0):>18} {ms(c2 - c1):>15}", flush=True)


def query_cpu(root: Path, repeat: int) -> tuple[float, float, int, int]:
    """(plan CPU s, tasks CPU s, tasks, largest pickled partition bytes): best of ``repeat`` fresh queries."""
    import pickle

    from pyspark import cloudpickle

    options = {"path": str(root), "topic": TOPIC}
    best_plan = best_read = float("inf")
    n_tasks = biggest = 0
    for _ in range(repeat):
        reader = batch_reader(parse_options(options, streaming=False), projection_for(None))
        shipped = cloudpickle.dumps(reader)   # PySpark pickles the read function (and reader) before planning
        c0 = time.process_time()
        parts = [pickle.dumps(p) for p in reader.partitions()]
        c1 = time.process_time()
        rows = 0
        for blob in parts:
            task_reader, partition = pickle.loads(shipped), pickle.loads(blob)
            rows += sum(batch.num_rows for batch in task_reader.read(partition))
        c2 = time.process_time()
        best_plan, best_read = min(best_plan, c1 - c0), min(best_read, c2 - c1)
        n_tasks, biggest = len(parts), max(len(b) for b in parts)
        assert rows, "every query reads its messages"
    return best_plan, best_read, n_tasks, biggest


def query_costs(base: Path, queue_counts: list[int], repeat: int, profile: int | None,
                sort: str = "cumulative") -> None:
    print(f"{'queues':>7} {'tasks':>6} {'partition B':>12} {'plan ms':>8} {'tasks ms':>9} {'query ms':>9} "
          f"{'vs first':>9}")
    first = None
    for n in queue_counts:
        root = base / f"query-q{n}"
        build(root, n, 1)
        if profile == n:
            import cProfile
            import pstats

            query_cpu(root, 1)   # warm: imports and first calls are not the query's
            prof = cProfile.Profile()
            prof.runcall(query_cpu, root, 1)
            pstats.Stats(prof).sort_stats(sort).print_stats(40)
        plan, read, n_tasks, size = query_cpu(root, repeat)
        total = plan + read
        first = total if first is None else first
        print(f"{n:>7} {n_tasks:>6} {size:>12} {ms(plan)} {ms(read):>9} {ms(total):>9} {ms(total - first):>9}",
              flush=True)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", default="8,128,1024")
    ap.add_argument("--triggers", type=int, default=30)
    ap.add_argument("--messages", type=int, default=64, help="messages per queue before the first trigger")
    ap.add_argument("--dir", default=None, help="where the stores go (a temporary directory by default)")
    ap.add_argument("--modes", default="local,network", help="local and/or network")
    ap.add_argument("--broker", default="ours", choices=("ours", "java"), help="the broker of network mode")
    ap.add_argument("--tasks", action="store_true", help="task counts by messages vs by bytes (issue 21)")
    ap.add_argument("--query", action="store_true", help="a batch query's CPU outside Spark (issue 21)")
    ap.add_argument("--queue-counts", default="8,1024", help="--query: queues of the topics, one message each")
    ap.add_argument("--repeat", type=int, default=5, help="--query: best of this many queries")
    ap.add_argument("--profile", type=int, default=None, help="--query: cProfile the query at this many queues")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-planning-", dir=args.dir))
    try:
        if args.tasks:
            task_counts(base)
            return
        if args.query:
            query_costs(base, [int(q) for q in args.queue_counts.split(",")], args.repeat, args.profile)
            return
        print(f"{'mode':<8} {'queues':>7} {'what':<20} {'median ms':>9} {'p90 ms':>8}")
        for mode in args.modes.split(","):
            label = mode if mode == "local" else f"net-{args.broker}"
            for n in (int(q) for q in args.queues.split(",")):
                times = bench(base / f"{mode}-q{n}", n, args.triggers, args.messages, mode, args.broker)
                for what, values in times.items():
                    p90 = sorted(values)[int(len(values) * 0.9) - 1 if len(values) > 1 else 0]
                    print(f"{label:<8} {n:>7} {what:<20} {ms(statistics.median(values))} {ms(p90)}", flush=True)
                shutil.rmtree(base / f"{mode}-q{n}", ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
