"""Sink benchmark: rows/s of ``df.write.format("rocketmq")`` in network mode (our Producer's send_batch through a
broker) and local mode (the store's columnar put), next to the Java producer (tests/java/LoadGen.java, the 4.9.8
client: ``send`` from 8 threads, ``batch`` of 32 per call, and ``batch`` of ``--batch-size`` per call, the sink's
own batch size) against the same broker, on this machine.

    python tests/benchmarks/bench_sink.py [--rows 100000] [--size 1024] [--full] [--broker ours|java]
                                          [--batch-size 1024] [--partitions 2] [--json FILE] [--keep] [--eos]

``--eos``: instead, the exactly-once streaming sink (``exactlyOnce``: one half message per row, ended by the
driver) against the at-least-once one (``send_batch``), in one run, on both brokers one after the other
(``--broker`` ignored): ``rows`` rows of ``size`` bytes written once to parquet, then one Trigger.AvailableNow
micro-batch of ``readStream.parquet`` into the sink per measurement (a warm-up query of 2,000 rows first),
timed from ``start()`` to the query's end; prints rows/s and the exactly-once / at-least-once ratio.

``--full`` is the issue's setting: 1 M rows of 1 KiB. Spark runs local[2] (as the tests); the DataFrame is
``spark.range(rows)`` with a constant ``size``-byte body, in ``--partitions`` partitions (each a task with its
own producer). Times are wall clock from the action's start to its end (the Spark job: planning, Python
workers, sends); the Java producer's msgs/s is LoadGen's own (after its warm-up). Goal (issue 12): network
sink ≥ 0.5× the Java producer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks.bench_broker import compile_loadgen, loadgen, start_java, start_ours, stop  # noqa: E402


def spark_session(partitions: int):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("bench-sink")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(partitions))
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.default.parallelism", str(partitions)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from rocketstream.spark import register

    register(spark)
    return spark


def frame(spark, rows: int, size: int, partitions: int):
    return spark.range(0, rows, 1, partitions).selectExpr(f"cast(repeat('x', {size}) as binary) AS body")


def timed_write(df, **options) -> float:
    w = df.write.format("rocketmq").mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    t0 = time.perf_counter()
    w.save()
    return time.perf_counter() - t0


def timed_stream(spark, src: str, ckpt: str, **options) -> float:
    w = spark.readStream.schema("body binary").parquet(src).writeStream.format("rocketmq") \
        .option("checkpointLocation", ckpt).trigger(availableNow=True)
    for k, v in options.items():
        w = w.option(k, v)
    t0 = time.perf_counter()
    q = w.start()
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"query failed: {q.exception()}")
    return time.perf_counter() - t0


def eos_compare(args: argparse.Namespace, rows: int, home: Path) -> int:
    """``--eos``: exactly-once vs at-least-once streaming sink, both brokers."""
    spark = spark_session(args.partitions)
    src, warm = str(home / "src"), str(home / "warm")
    frame(spark, rows, args.size, args.partitions).write.parquet(src)
    frame(spark, 2000, args.size, args.partitions).write.parquet(warm)
    results: dict[str, dict] = {}
    try:
        for kind in args.eos_brokers.split(","):
            (home / kind).mkdir()
            broker = start_java(home / kind) if kind == "java" else start_ours(home / kind)
            try:
                ns = broker.namesrv_addr
                for label, extra in (("at-least-once", {}), ("exactly-once", {"exactlyOnce": "true"})):
                    tag = label.replace("-", "")
                    timed_stream(spark, warm, str(home / f"ck-warm-{kind}-{tag}"), nameServer=ns,
                                 topic=f"Warm{tag}", **extra)
                    # a long send timeout: the exactly-once sink never retries a half message (a timeout fails the
                    # task, and local[2] does not retry tasks); on a loaded machine 3 s is not enough
                    secs = timed_stream(spark, src, str(home / f"ck-{kind}-{tag}"), nameServer=ns,
                                        topic=f"SinkBench{tag}", batchSize=str(args.batch_size),
                                        sendTimeoutMs="30000", **extra)
                    results[f"{label} ({kind})"] = {"rows_per_s": round(rows / secs), "seconds": round(secs, 2)}
                    print(f"{kind} {label}: {rows} rows in {secs:.2f} s", flush=True)
            finally:
                stop(broker)
    finally:
        spark.stop()
    print(f"\n{rows:,} rows x {args.size} B, Spark local[2], {args.partitions} partitions, one micro-batch")
    print(f"{'sink':30} {'rows/s':>10} {'seconds':>8}")
    for name, r in results.items():
        print(f"{name:30} {r['rows_per_s']!s:>10} {r['seconds']!s:>8}")
    for kind in args.eos_brokers.split(","):
        a, e = results[f"at-least-once ({kind})"], results[f"exactly-once ({kind})"]
        print(f"exactly-once / at-least-once ({kind}): {e['rows_per_s'] / a['rows_per_s']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "size": args.size, "results": results}, indent=2))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--full", action="store_true", help="1,000,000 rows")
    ap.add_argument("--broker", choices=("ours", "java"), default="ours")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--eos", action="store_true", help="exactly-once vs at-least-once streaming sink, both brokers")
    ap.add_argument("--eos-brokers", default="ours,java", help="with --eos: the brokers, in order (default ours,java)")
    args = ap.parse_args()
    rows = 1_000_000 if args.full else args.rows
    home = Path(tempfile.mkdtemp(prefix="bench-sink-"))
    if args.eos:
        try:
            return eos_compare(args, rows, home)
        finally:
            if not args.keep:
                import shutil
                shutil.rmtree(home, ignore_errors=True)
    results: dict[str, dict] = {}
    spark = spark_session(args.partitions)
    df = frame(spark, rows, args.size, args.partitions)
    # warm the Python workers and the JVM's code paths on a small local write
    timed_write(frame(spark, 2000, args.size, args.partitions), topic="Warm", path=str(home / "warm-store"))

    secs = timed_write(df, topic="SinkBench", path=str(home / "local-store"), batchSize=str(args.batch_size))
    results["spark sink, local mode"] = {"rows_per_s": round(rows / secs), "seconds": round(secs, 2)}
    print(f"local mode: {rows} rows in {secs:.2f} s", flush=True)

    (home / args.broker).mkdir()
    broker = start_java(home / "java") if args.broker == "java" else start_ours(home / "ours")
    try:
        ns = broker.namesrv_addr
        timed_write(frame(spark, 2000, args.size, args.partitions), topic="Warm", nameServer=ns)
        secs = timed_write(df, topic="SinkBench", nameServer=ns, batchSize=str(args.batch_size))
        results[f"spark sink, network mode ({args.broker} broker)"] = {"rows_per_s": round(rows / secs),
                                                                         "seconds": round(secs, 2)}
        print(f"network mode: {rows} rows in {secs:.2f} s", flush=True)
        classes = compile_loadgen(home / "loadgen")
        for mode, extra in (("send", []), ("batch", ["--batch", "32"]),
                            (f"batch{args.batch_size}", ["--batch", str(args.batch_size)])):
            out = loadgen(classes, home / "client", mode.rstrip("0123456789"), ns, f"JavaBench{mode}", "--threads",
                          "8", "--size",
                          str(args.size), "--count", str(rows), *extra, timeout=1800)
            results[f"Java producer {mode} ({args.broker} broker)"] = {"rows_per_s": out.get("msgs_per_s"),
                                                                     "seconds": out.get("seconds")}
            print(f"java {mode}: {out.get('msgs_per_s')} msgs/s", flush=True)
    finally:
        stop(broker)
        spark.stop()
    print(f"\n{rows:,} rows x {args.size} B, Spark local[2], {args.partitions} partitions, "
          f"batchSize {args.batch_size}")
    print(f"{'writer':45} {'rows/s':>10} {'seconds':>8}")
    for name, r in results.items():
        print(f"{name:45} {r['rows_per_s']!s:>10} {r['seconds']!s:>8}")
    net = next(v for k, v in results.items() if k.startswith("spark sink, network"))
    for mode in ("send", "batch", f"batch{args.batch_size}"):
        java = results.get(f"Java producer {mode} ({args.broker} broker)", {}).get("rows_per_s")
        if java:
            print(f"network sink / Java producer {mode}: {net['rows_per_s'] / java:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "size": args.size, "results": results}, indent=2))
    if not args.keep:
        import shutil
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
