"""Spark benchmark: `sum(length(body))` over the same rows through several readers, in one run.

    python tests/benchmarks/bench_spark.py [--messages 1000000] [--sizes 256,1024,4096] [--dir DIR]
        [--network ours,java | --network none] [--local-only] [--partitions default|N] [--queue-counts 8,1024]

For each body size it writes ``--messages`` messages (1 % of them tagged ``TagRare``) into a fresh
store and the same rows (all columns) into a Parquet file, then times on local[2]:
  * ours:      spark.read.format("rocketmq") over the store
  * parquet:   spark.read.parquet of the same rows
  * synthetic: a Python data source yielding prebuilt Arrow batches of the same schema (the API's ceiling)
  ours and synthetic also print the median CPU per query of the JVM and of PySpark's Python processes (/proc),
  and synthetic's JVM + Python CPU over ours' (the wall ratio's counterpart that a loaded machine moves less).
  Both are warmed up before either is timed and their repeats alternate (ours, synthetic, synthetic, ours,
  ...): the JVM's JIT compilers keep working through a session's first queries (their threads took 0.4-0.5 s
  of a query's 1.4 s of JVM CPU at the start, 0.1-0.2 s ten queries later), which timing one source's
  repeats before the other's charged to the first.
  * tag 1 %:   our source with subExpression=TagRare (ConsumeQueue tagsCode filter) vs our full scan, and vs
               "floor": the synthetic source reading 100 rows (what any query of a few rows costs; goal <= 1.5x)
  Our source plans its tasks itself (``--partitions default``: by bytes, issue 21) or with numPartitions=N;
  the task counts (``df.rdd.getNumPartitions()``) are printed.
  ``--queue-counts 8,1024``: a batch query (count and sum of body lengths) over a topic of that many queues of
  one message each, the cost of many small queue ranges (issue 21's goal: 1,024 within +150 ms of 8); wall
  time and the CPU of the Spark processes (the JVM, PySpark's Python daemon and workers, from /proc), which a
  shared machine disturbs less.
  * network (issue 12), over the same store files, one broker at a time on free 127.0.0.1 ports:
      ours-default / ours-raised: `rocketstream serve --store STORE` (name server in the same process)
      java-default / java-raised: the real Apache RocketMQ 4.9.8 name server + broker on STORE
    and spark.read.format("rocketmq").option("nameServer", ...) against it. "default" is RocketMQ's
    getMessage transfer limits (maxTransferCountOnMessageInMemory 32, maxTransferBytesOnMessageInMemory
    256 KiB; on disk 8 / 64 KiB); "raised" sets them (memory and disk) to RAISED_CONF. Each network time is
    compared with "ours" (local mode on the same store files) measured in this run; goal >= 0.7x.
``--data DIR`` keeps the store and the Parquet rows of each size in DIR and reuses them in a later run with the
same ``--messages`` (A/B runs of two checkouts, one after the other, over the same rows).
Each query runs ``--repeat`` times after one warm-up; the best time counts. Ratios are computed
from numbers measured in this run. Data lives under a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from rocketstream.codec.arrow_records import MESSAGE_SCHEMA
from rocketstream.store import MessageStore, StoreConfig

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.realbroker import peers  # noqa: E402

TOPIC = "BenchTopic"
QUEUES = 4
PARTITIONS = 2
BATCH_ROWS_TARGET_BYTES = 2 << 20
# RocketMQ's in-memory and on-disk transfer limits of DefaultMessageStore.getMessage, raised so that one
# pull can carry what the reader asks for (4096 messages, network/puller.py PULL_MAX_NUMS) up to 8 MiB (< the
# 16 MiB frame: about 2,000 records of 4 KiB)
RAISED_CONF = {
    "maxTransferCountOnMessageInMemory": "4096", "maxTransferBytesOnMessageInMemory": str(8 << 20),
    "maxTransferCountOnMessageInDisk": "4096", "maxTransferBytesOnMessageInDisk": str(8 << 20),
}
NETWORK_CASES = ("ours-default", "ours-raised", "java-default", "java-raised")


class _SyntheticPartition(InputPartition):
    def __init__(self, index: int, rows: int, store: str, body_size: int) -> None:
        super().__init__(index)
        self.rows, self.store, self.body_size = rows, store, body_size


class SyntheticReader(DataSourceReader):
    def __init__(self, options: dict) -> None:
        self.rows = int(options["rows"])
        self.store = options["store"]
        self.body_size = int(options["bodySize"])

    def partitions(self):
        share = self.rows // PARTITIONS
        return [_SyntheticPartition(i, share + (self.rows % PARTITIONS if i == 0 else 0), self.store, self.body_size)
                for i in range(PARTITIONS)]

    def read(self, partition: _SyntheticPartition):
        # one prebuilt batch (real rows of the store), yielded until the partition's row count is reached
        with MessageStore.open(partition.store, read_only=True) as store:
            batch = next(iter(store.read_range(TOPIC, 0, 0, store.max_offset(TOPIC, 0))))
        batch = batch.slice(0, max(1, min(batch.num_rows, BATCH_ROWS_TARGET_BYTES // max(partition.body_size, 1))))
        left = partition.rows
        while left > 0:
            out = batch if left >= batch.num_rows else batch.slice(0, left)
            left -= out.num_rows
            yield out


class SyntheticSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "synthetic_arrow"

    def schema(self) -> str:
        from rocketstream.codec.arrow_records import spark_ddl

        return spark_ddl(MESSAGE_SCHEMA)

    def reader(self, schema) -> DataSourceReader:
        return SyntheticReader(self.options)


def produce(root: Path, n: int, body_size: int) -> None:
    """Distinct, incompressible bodies (slices of a random pool at distinct offsets), so neither
    Parquet's dictionary encoding nor compression can shortcut the scan."""
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 30, compress_msg_body_over=1 << 30)
    pool = os.urandom(64 << 20)
    span = len(pool) - body_size
    view = memoryview(pool)
    with MessageStore.open(root, config=cfg) as store:
        store.create_topic(TOPIC, QUEUES)
        batch = 256
        for i in range(0, n, batch):
            count = min(batch, n - i)
            # slice the memoryview: pool[o:] would copy up to 64 MiB per message
            bodies = [bytes(view[o:o + body_size]) for o in ((k * 4099) % span for k in range(i, i + count))]
            tags = ["TagRare" if (i + k) % 100 == 0 else "TagCommon" for k in range(count)]
            keys = [f"k{i + k}" for k in range(count)]
            result = store.put_batch(TOPIC, (i // batch) % QUEUES, bodies, tags=tags, keys=keys)
            assert result.status.name == "PUT_OK", result.status


def write_parquet(root: Path, path: Path) -> None:
    with MessageStore.open(root, read_only=True) as store, pq.ParquetWriter(path, MESSAGE_SCHEMA) as writer:
        for q in store.queue_ids(TOPIC):
            for rb in store.read_range(TOPIC, q, 0, store.max_offset(TOPIC, q)):
                writer.write_table(pa.Table.from_batches([rb]))


def best_time(fn, repeat: int) -> tuple[float, object]:
    fn()  # warm-up (JVM, Python workers, page cache, connections)
    times, value = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return min(times), value


def tree_cpu_split() -> tuple[float, float]:
    """CPU seconds (user + sys, with reaped children) of this process's descendants from /proc/<pid>/stat, as
    (the JVM, PySpark's Python daemon, workers and planners). Steadier than wall time on a shared machine."""
    procs: dict[int, tuple[int, int, bool]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                raw = f.read()
        except OSError:
            continue   # exited meanwhile
        comm, fields = raw[raw.index("(") + 1:raw.rindex(")")], raw.rsplit(")", 1)[1].split()
        procs[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]), comm == "java")
    mine, frontier = set(), {os.getpid()}
    while frontier:
        mine |= frontier
        frontier = {pid for pid, (ppid, _, _) in procs.items() if ppid in frontier and pid not in mine}
    mine.discard(os.getpid())
    tck = os.sysconf("SC_CLK_TCK")
    jvm = sum(procs[pid][1] for pid in mine if procs[pid][2])
    python = sum(procs[pid][1] for pid in mine if not procs[pid][2])
    return jvm / tck, python / tck


def tree_cpu() -> float:
    """CPU seconds of this process's descendants (the JVM and its Python processes: ``tree_cpu_split``)."""
    return sum(tree_cpu_split())


def alternating_time_and_split(fns: dict[str, Callable[[], Any]],
                               repeat: int) -> dict[str, tuple[float, float, float, Any]]:
    """Several queries timed in turn: each is warmed up once before any is timed, then ``repeat`` rounds
    run them in alternating order (A B, B A, ...), so JIT warm-up and the machine's other load fall on all
    alike. name -> (best time, median CPU of the JVM and of the Python processes (``tree_cpu_split``; the
    median, as a Python worker that exits during a run takes its CPU with it: that run's figure is too low,
    even below zero), last value)."""
    for fn in fns.values():
        fn()
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in fns}
    values: dict[str, object] = {}
    names = list(fns)
    for i in range(repeat):
        for name in (names if i % 2 == 0 else names[::-1]):
            (j0, p0), t0 = tree_cpu_split(), time.perf_counter()
            values[name] = fns[name]()
            t = time.perf_counter() - t0
            j1, p1 = tree_cpu_split()
            runs[name].append((t, j1 - j0, p1 - p0))
    return {name: (min(r[0] for r in rows), statistics.median(r[1] for r in rows),
                   statistics.median(r[2] for r in rows), values[name])
            for name, rows in runs.items()}


def best_time_and_cpu(fn, repeat: int) -> tuple[float, float, object]:
    """``best_time`` plus the least CPU of the Spark processes (``tree_cpu``) over the same runs."""
    fn()
    times, cpus, value = [], [], None
    for _ in range(repeat):
        c0, t0 = tree_cpu(), time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
        cpus.append(tree_cpu() - c0)
    return min(times), min(cpus), value


# ---- brokers serving the benchmark's store ---------------------------------------------------------

class BenchError(RuntimeError):
    """A broker did not start (the message carries its log tail)."""


class Served:
    """A name server + broker serving a store; ``stop`` ends exactly the processes started here."""

    def __init__(self, namesrv_addr: str, procs: list[subprocess.Popen], logs: list[Path]) -> None:
        self.namesrv_addr, self.procs, self.logs = namesrv_addr, procs, logs

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            peers._forget(proc)


def _tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def serve_ours(store: Path, home: Path, extra: dict[str, str]) -> Served:
    """``rocketstream serve --store STORE`` (name server in the same process) with ``extra`` in its conf."""
    home.mkdir(parents=True, exist_ok=True)
    conf = home / "broker.conf"
    settings = {"mappedFileSizeCommitLog": str(1 << 30), "flushDiskType": "ASYNC_FLUSH", **extra}
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    port, ns_port = peers.free_port((0, 1)), peers.free_port()
    log = home / "serve.log"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("ROCKETSTREAM_CONF", None)
    proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "serve", "--store", str(store),
                         "--listen", f"{peers.BIND}:{port}", "--namesrv-listen", f"{peers.BIND}:{ns_port}",
                         "--conf", str(conf)], env, log)
    served = Served(f"{peers.BIND}:{ns_port}", [proc], [log])
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        lines = log.read_text(errors="replace").splitlines()
        if any("The broker[" in line and "boot success" in line for line in lines):
            return served
        if proc.poll() is not None:
            raise BenchError(f"rocketstream serve exited with {proc.returncode}:\n{_tail(log)}")
        time.sleep(0.1)
    served.stop()
    raise BenchError(f"rocketstream serve not ready after 120 s:\n{_tail(log)}")


def serve_java(store: Path, home: Path, extra: dict[str, str]) -> Served:
    """The real 4.9.8 name server + broker (tests/realbroker/peers.py) on STORE; file sizes as the store's."""
    home.mkdir(parents=True, exist_ok=True)
    namesrv = peers.start_namesrv(home)
    try:
        namesrv.wait_ready("boot success")
        port = peers.free_port((-2, 0, 1))
        bhome = home / "java-broker"
        bhome.mkdir(parents=True, exist_ok=True)
        argv = peers.broker_command(bhome, port, f"{peers.BIND}:{namesrv.port}", store=store, extra_conf=extra,
                                    commitlog_file_size=1 << 30, cq_file_size=6000000, heap="512m")
        log = bhome / "broker.out"
        proc = peers._spawn(argv, peers.server_env(peers.find_dist()), log)
    except BaseException:
        namesrv.kill()
        raise
    served = Served(f"{peers.BIND}:{namesrv.port}", [proc, namesrv.proc], [log, namesrv.log])
    try:
        peers.Server("java broker", proc, log, port).wait_ready("boot success", timeout=180)
    except BaseException:
        served.stop()
        raise
    return served


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--sizes", default="256,1024,4096")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--data", type=Path, default=None,
                    help="keep the written store and Parquet rows in DATA and reuse them in later runs with the same "
                         "--messages (A/B runs of two checkouts on the same rows; not removed at the end)")
    ap.add_argument("--network", default=",".join(NETWORK_CASES),
                    help=f"network cases to run, comma-separated from {', '.join(NETWORK_CASES)}; 'none' for none")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the Parquet, synthetic and tag-filter queries (local mode and network only)")
    ap.add_argument("--partitions", default="default",
                    help="our source's numPartitions, or 'default' (planned by bytes, issue 21)")
    ap.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                    help="another option of our source for every query of it (repeatable), e.g. "
                         "maxPartitionBytes=268435456; numPartitions=2 alone still cuts a share above "
                         "maxPartitionBytes (128 MiB) into more tasks")
    ap.add_argument("--queue-counts", default="",
                    help="also time a batch query over N queues of one message each, e.g. 8,1024")
    args = ap.parse_args()
    partitions = {} if args.partitions == "default" else {"numPartitions": str(int(args.partitions))}
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep or not name:
            ap.error(f"--option {item!r}: expected NAME=VALUE")
        partitions[name] = value
    cases = [] if args.network == "none" else [c.strip() for c in args.network.split(",") if c.strip()]
    bad = [c for c in cases if c not in NETWORK_CASES]
    if bad:
        ap.error(f"--network: unknown case(s) {bad}; choose from {NETWORK_CASES}")

    from rocketstream.demo import spark_session

    spark = spark_session("rocketstream-bench")
    spark.dataSource.register(SyntheticSource)
    base = Path(tempfile.mkdtemp(prefix="rs-spark-bench-", dir=args.dir))
    kept = args.data.resolve() if args.data is not None else None
    results, net_results = [], []
    try:
        for body_size in (int(s) for s in args.sizes.split(",")):
            data = base if kept is None else kept / f"{args.messages}x{body_size}"
            root, parquet = data / f"store-{body_size}", data / f"rows-{body_size}.parquet"
            done = data / "complete"   # written last: a run stopped while writing leaves no reusable data
            t0 = time.perf_counter()
            if not (done.exists() and (args.no_reference or parquet.exists())):
                shutil.rmtree(root, ignore_errors=True)
                produce(root, args.messages, body_size)
                if not args.no_reference:
                    write_parquet(root, parquet)
                if kept is not None:
                    done.touch()
                print(f"[{body_size} B] data written in {time.perf_counter() - t0:.1f} s", flush=True)
            else:
                print(f"[{body_size} B] reusing the data in {data}", flush=True)

            # the queries below run within this iteration of the loop (B023 noted on each)
            def ours_df(sub: str = "*"):
                return (spark.read.format("rocketmq").option("topic", TOPIC).option("subExpression", sub)
                        .options(**partitions).load(str(root)))  # noqa: B023

            def ours(sub: str = "*"):
                return ours_df(sub).selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]

            def parquet_q():
                df = spark.read.parquet(str(parquet))  # noqa: B023
                return df.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]

            def synthetic(rows: int = args.messages):
                df = (spark.read.format("synthetic_arrow").option("rows", str(rows))
                      .option("store", str(root)).option("bodySize", str(body_size)).load())  # noqa: B023
                return df.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]

            def network(namesrv: str):
                df = (spark.read.format("rocketmq").option("nameServer", namesrv).option("topic", TOPIC)
                      .options(**partitions).load())
                return df.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]

            timed = alternating_time_and_split({"ours": ours} if args.no_reference else
                                               {"ours": ours, "synthetic": synthetic}, args.repeat)
            t_ours, jvm_ours, py_ours, r_ours = timed["ours"]
            tasks_full, tasks_tag = ours_df().rdd.getNumPartitions(), ours_df("TagRare").rdd.getNumPartitions()
            print(f"[{body_size} B] local mode {t_ours:.2f} s, {tasks_full} tasks (tag 1 %: {tasks_tag}); CPU per "
                  f"query: JVM {jvm_ours:.2f} s, Python workers {py_ours:.2f} s", flush=True)
            assert r_ours["n"] == args.messages, r_ours
            if not args.no_reference:
                t_pq, r_pq = best_time(parquet_q, args.repeat)
                t_syn, jvm_syn, py_syn, r_syn = timed["synthetic"]
                # the CPU both sides' processes spend per query, a steadier figure than wall time on a shared
                # machine (a worker that exited during most runs took its CPU with it: no figure then)
                cpu_ratio = (f"{(jvm_syn + py_syn) / (jvm_ours + py_ours):.2f}x" if min(py_syn, py_ours) > 0
                             else "n/a (a Python worker exited during the runs)")
                print(f"[{body_size} B] synthetic {t_syn:.2f} s (ours at {t_syn / t_ours:.2f}x of it); CPU per query: "
                      f"JVM {jvm_syn:.2f} s, Python workers {py_syn:.2f} s; by JVM + Python CPU ours at {cpu_ratio}",
                      flush=True)
                t_tag, r_tag = best_time(lambda: ours("TagRare"), args.repeat)
                t_floor, r_floor = best_time(lambda: synthetic(100), args.repeat)
                assert r_floor["n"] == 100, r_floor
                assert r_pq["n"] == r_syn["n"] == args.messages, (r_ours, r_pq, r_syn)
                assert r_ours["b"] == r_pq["b"], (r_ours, r_pq)
                assert r_tag["n"] == (args.messages + 99) // 100, r_tag
                results.append((body_size, args.messages, t_ours, t_pq, t_syn, t_tag, t_floor, tasks_full, tasks_tag))
                if kept is None:
                    parquet.unlink()
            for case in cases:
                kind, limits = case.split("-")
                extra = dict(RAISED_CONF) if limits == "raised" else {}
                home = base / f"{case}-{body_size}"
                t0 = time.perf_counter()
                served = (serve_ours if kind == "ours" else serve_java)(root, home, extra)
                try:
                    print(f"[{body_size} B] {case} broker up in {time.perf_counter() - t0:.1f} s", flush=True)
                    t_net, r_net = best_time(lambda: network(served.namesrv_addr), args.repeat)  # noqa: B023
                finally:
                    served.stop()
                assert (r_net["n"], r_net["b"]) == (r_ours["n"], r_ours["b"]), (case, r_net, r_ours)
                print(f"[{body_size} B] {case} {t_net:.2f} s = {t_ours / t_net:.2f}x local", flush=True)
                net_results.append((body_size, case, t_net, t_ours))
                shutil.rmtree(home, ignore_errors=True)
            if kept is None:
                shutil.rmtree(root)
        queue_results = []
        for count in (int(c) for c in args.queue_counts.split(",") if c.strip()):
            root = base / f"queues-{count}"
            with MessageStore.open(root, create=True) as store:
                store.create_topic(TOPIC, count)
                for qid in range(count):
                    store.put_batch(TOPIC, qid, [b"x" * 100], tags="TagCommon")

            def few(r: Path = root):
                df = spark.read.format("rocketmq").option("topic", TOPIC).options(**partitions).load(str(r))
                return df.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]

            t_q, cpu_q, r_q = best_time_and_cpu(few, args.repeat)
            assert r_q["n"] == count, r_q
            tasks_q = spark.read.format("rocketmq").option("topic", TOPIC).options(**partitions).load(
                str(root)).rdd.getNumPartitions()
            print(f"[{count} queues x 1] {t_q:.3f} s, Spark processes' CPU {cpu_q:.3f} s, {tasks_q} tasks",
                  flush=True)
            queue_results.append((count, t_q, cpu_q, tasks_q))
            shutil.rmtree(root)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)

    n = args.messages
    load = os.getloadavg()
    if results:
        print(f"\nsum(length(body)) over {n:,} messages, local[2], best of {args.repeat}")
        print(f"{'body':>6} {'ours rows/s':>12} {'ours MB/s':>10} {'parquet rows/s':>15} {'synthetic rows/s':>17} "
              f"{'vs ceiling':>10} {'vs parquet':>10} {'tag 1% s':>9} {'full/tag':>9} {'floor s':>8} "
              f"{'tag/floor':>9} {'tasks':>6} {'tag tasks':>9}")
        for size, n, t_o, t_p, t_s, t_t, t_f, k_o, k_t in results:
            print(f"{size:>6} {n / t_o:12,.0f} {n * size / t_o / 1e6:10.1f} {n / t_p:15,.0f} {n / t_s:17,.0f} "
                  f"{t_s / t_o:10.2f} {t_p / t_o:10.2f} {t_t:9.3f} {t_o / t_t:9.1f} {t_f:8.3f} {t_t / t_f:9.2f} "
                  f"{k_o:>6} {k_t:>9}")
    if queue_results:
        print(f"\nbatch query over N queues of one message each, best of {args.repeat} (wall; CPU of the JVM and "
              f"its Python workers)")
        first, first_cpu = queue_results[0][1], queue_results[0][2]
        for count, t_q, cpu_q, tasks_q in queue_results:
            print(f"{count:>6} queues {t_q:8.3f} s {tasks_q:>4} tasks  +{(t_q - first) * 1000:7.0f} ms   "
                  f"cpu {cpu_q:7.3f} s  +{(cpu_q - first_cpu) * 1000:7.0f} ms")
    if net_results:
        print(f"\nnetwork mode vs local mode on the same store, {n:,} messages, local[2], best of {args.repeat} "
              f"(goal for ours >= 0.7x)")
        print(f"{'body':>6} {'reader':>14} {'s':>8} {'rows/s':>12} {'MB/s':>8} {'local s':>8} {'net/local':>10}")
        for size, case, t_net, t_loc in net_results:
            print(f"{size:>6} {case:>14} {t_net:8.2f} {n / t_net:12,.0f} {n * size / t_net / 1e6:8.1f} "
                  f"{t_loc:8.2f} {t_loc / t_net:10.2f}")
    print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (machine shared with other jobs)")


if __name__ == "__main__":
    main()
