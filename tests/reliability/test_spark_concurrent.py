"""Item 3 (Spark part): a streaming query reads while a writer process appends.

``spark_producer.py`` appends self-describing messages (queue id and sequence in every body) to a
store with small commit-log files; meanwhile a ``readStream.format("rocketmq")`` query writes them to
a parquet file sink. Once the producer is done and the query has caught up, the sink's committed files
must hold every message exactly once, in queue order, with every body byte-identical (0 torn or
partial records). The slow campaign pushes >= 1 M messages through in rounds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spark_reliutil import (
    TOPIC,
    checkpoint_committed_offsets,
    read_sink,
    spawn_logged,
    store_max_offsets,
    verify_rows,
)
from spark_session import spark  # noqa: F401  (the session fixture)

SCHEMA = "queueId int, queueOffset long, body binary"


def one_round(spark, base: Path, total: int, rate: float, cl_file: int, per_trigger: int | None) -> dict:  # noqa: F811
    root, ckpt, out = base / "broker-a", base / "ckpt", base / "out"
    base.mkdir(parents=True, exist_ok=True)
    producer = spawn_logged("spark_producer.py", root, total, 4, rate, cl_file, log=base / "producer.log")
    deadline = time.monotonic() + 60
    while not (root / "config" / "topics.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stream = (spark.readStream.format("rocketmq").schema(SCHEMA).option("topic", TOPIC)
              .option("startingOffsets", "earliest"))
    if per_trigger:
        stream = stream.option("maxMessagesPerTrigger", str(per_trigger))
    query = (stream.load(str(root)).writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(ckpt)).trigger(processingTime="0 seconds").start())
    problems: list[str] = []
    started = time.monotonic()
    try:
        if producer.wait(1200) != 0:
            problems.append(f"producer failed: {(base / 'producer.log').read_text()[-2000:]}")
        expected = {str(q): o for q, o in store_max_offsets(root).items()}

        def caught_up() -> bool:
            committed = checkpoint_committed_offsets(ckpt) if (ckpt / "commits").is_dir() else None
            return bool(committed) and committed.get(TOPIC, {}).get("broker-a") == expected

        deadline = time.monotonic() + 600
        while not caught_up() and query.isActive and time.monotonic() < deadline:
            time.sleep(0.1)
        if query.exception() is not None:
            problems.append(f"query failed: {str(query.exception())[:3000]}")
        elif not caught_up():
            problems.append(f"query did not catch up: {checkpoint_committed_offsets(ckpt)} vs {expected}")
        batches = len([p for p in (ckpt / "commits").iterdir() if p.name.isdigit()])
    finally:
        query.stop()
        if producer.poll() is None:
            producer.kill()
    elapsed = time.monotonic() - started
    maxes = store_max_offsets(root)
    problems += verify_rows(read_sink(out, ["queueId", "queueOffset", "body"]), maxes)
    figures = {"item": "3-spark-concurrent", "messages": sum(maxes.values()), "batches": batches,
               "seconds": round(elapsed, 1), "problems": problems}
    print("RELIABILITY", figures, flush=True)
    return figures


@pytest.mark.spark
def test_stream_reads_a_live_writer_exactly_once(spark, tmp_path: Path) -> None:  # noqa: F811
    figures = one_round(spark, tmp_path, total=8_000, rate=4_000, cl_file=64 * 1024, per_trigger=1_500)
    assert figures["problems"] == []
    assert figures["batches"] >= 2  # the query really read while the writer was appending


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("trial,total,rate,per_trigger", [
    (0, 500_000, 0, None),          # flat out, read everything available each trigger
    (1, 300_000, 20_000, 25_000),   # paced writer, rate-limited reader
    (2, 250_000, 0, 7_000),         # many small batches against a flat-out writer
])
def test_stream_reads_a_live_writer_campaign(spark, tmp_path: Path, trial, total, rate, per_trigger) -> None:  # noqa: F811
    figures = one_round(spark, tmp_path, total=total, rate=rate, cl_file=1 << 20, per_trigger=per_trigger)
    assert figures["problems"] == []
