"""Spark benchmark: `sum(length(body))` over the same rows through three readers, in one run.

    python tests/benchmarks/bench_spark.py [--messages 1000000] [--sizes 256,1024,4096] [--dir DIR]

For each body size it writes ``--messages`` messages (1 % of them tagged ``TagRare``) into a fresh
store and the same rows (all columns) into a Parquet file, then times on local[2]:
  * ours:      spark.read.format("rocketmq") over the store
  * parquet:   spark.read.parquet of the same rows
  * synthetic: a Python data source yielding prebuilt Arrow batches of the same schema (the API's ceiling)
  * tag 1 %:   our source with subExpression=TagRare (ConsumeQueue tagsCode filter) vs our full scan
Each query runs ``--repeat`` times after one warm-up; the best time counts. Ratios are computed
from numbers measured in this run. Data lives under a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from rocketstream.store import MessageStore, StoreConfig
from rocketstream.store.read.schema import MESSAGE_SCHEMA

TOPIC = "BenchTopic"
QUEUES = 4
PARTITIONS = 2
BATCH_ROWS_TARGET_BYTES = 2 << 20


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
        from rocketstream.store.read.schema import spark_ddl

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
    fn()  # warm-up (JVM, Python workers)
    times, value = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return min(times), value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--sizes", default="256,1024,4096")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()

    from rocketstream.demo import spark_session

    spark = spark_session("rocketstream-bench")
    spark.dataSource.register(SyntheticSource)
    base = Path(tempfile.mkdtemp(prefix="rs-spark-bench-", dir=args.dir))
    results = []
    try:
        for body_size in (int(s) for s in args.sizes.split(",")):
            root, parquet = base / f"store-{body_size}", base / f"rows-{body_size}.parquet"
            t0 = time.perf_counter()
            produce(root, args.messages, body_size)
            write_parquet(root, parquet)
            print(f"[{body_size} B] data written in {time.perf_counter() - t0:.1f} s", flush=True)

            # the three queries below run within this iteration of the loop (B023 noted on each)
            def ours(sub: str = "*"):
                df = (spark.read.format("rocketmq").option("topic", TOPIC).option("subExpression", sub)
                      .option("numPartitions", str(PARTITIONS)).load(str(root)))  # noqa: B023
                return df.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]

            def parquet_q():
                df = spark.read.parquet(str(parquet))  # noqa: B023
                return df.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]

            def synthetic():
                df = (spark.read.format("synthetic_arrow").option("rows", str(args.messages))
                      .option("store", str(root)).option("bodySize", str(body_size)).load())  # noqa: B023
                return df.selectExpr("count(*) AS n", "sum(length(body)) AS b").collect()[0]

            t_ours, r_ours = best_time(ours, args.repeat)
            t_pq, r_pq = best_time(parquet_q, args.repeat)
            t_syn, r_syn = best_time(synthetic, args.repeat)
            t_tag, r_tag = best_time(lambda: ours("TagRare"), args.repeat)
            assert r_ours["n"] == r_pq["n"] == r_syn["n"] == args.messages, (r_ours, r_pq, r_syn)
            assert r_ours["b"] == r_pq["b"], (r_ours, r_pq)
            assert r_tag["n"] == (args.messages + 99) // 100, r_tag
            results.append((body_size, args.messages, t_ours, t_pq, t_syn, t_tag))
            shutil.rmtree(root)
            parquet.unlink()
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)

    n = args.messages
    print(f"\nsum(length(body)) over {n:,} messages, local[2], best of {args.repeat}")
    print(f"{'body':>6} {'ours rows/s':>12} {'ours MB/s':>10} {'parquet rows/s':>15} {'synthetic rows/s':>17} "
          f"{'vs ceiling':>10} {'vs parquet':>10} {'tag 1% s':>9} {'full/tag':>9}")
    for size, n, t_o, t_p, t_s, t_t in results:
        print(f"{size:>6} {n / t_o:12,.0f} {n * size / t_o / 1e6:10.1f} {n / t_p:15,.0f} {n / t_s:17,.0f} "
              f"{t_s / t_o:10.2f} {t_p / t_o:10.2f} {t_t:9.3f} {t_o / t_t:9.1f}")


if __name__ == "__main__":
    main()
