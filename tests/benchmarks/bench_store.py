"""Store benchmark: batch append and bulk read-to-Arrow, each as a ratio to a raw mmap reference
measured in the same run.

    python tests/benchmarks/bench_store.py [--messages 200000] [--batch 256] [--dir /tmp/rs-bench]

Append: ``MessageStore.put_messages`` (encode records, write them to the mmap'd commit log, dispatch
ConsumeQueue units) against writing the *same record bytes* into a pre-sized mmap'd file in the same
batch-sized chunks. Read: ``MessageStore.read_range`` over every queue producing Arrow RecordBatches
(all columns) against a raw scan copying the same commit-log bytes out of the mmap in 4 MiB chunks.
Data lives in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import tempfile
import time
from pathlib import Path

from rocketstream.store import Message, MessageStore, StoreConfig

QUEUES = 4


def _messages(n: int, body_size: int, topic: str) -> list[Message]:
    body = os.urandom(body_size)
    tags = ("TagA", "TagB", "TagC", "TagD")
    return [Message(topic=topic, body=body, tags=tags[i % 4], keys=f"k{i}") for i in range(n)]


def bench_append(root: Path, n: int, body_size: int, batch: int) -> tuple[float, int, float]:
    """Returns (seconds, record bytes written, raw mmap seconds for the same bytes)."""
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 30, compress_msg_body_over=1 << 30)
    topic = f"Bench{body_size}"
    msgs = _messages(n, body_size, topic)
    with MessageStore.open(root, config=cfg) as store:
        store.create_topic(topic, QUEUES)
        start_off = store.commit_log_max_offset()
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            result = store.put_messages(msgs[i : i + batch], queue_id=(i // batch) % QUEUES)
            assert result.status.name == "PUT_OK", result.status
        elapsed = time.perf_counter() - t0
        written = store.commit_log_max_offset() - start_off
        # the same bytes, for the raw reference
        raw = bytes(store.commit_log.buffer_for(start_off)[1][start_off % cfg.mapped_file_size_commit_log :][:written])
    chunk = max(1, written // max(1, n // batch))
    raw_s = _raw_mmap_write(root / "raw-write", raw, chunk)
    return elapsed, written, raw_s


def _raw_mmap_write(path: Path, data: bytes, chunk: int) -> float:
    size = len(data)
    with open(path, "w+b") as f:
        f.truncate(size)
        mm = mmap.mmap(f.fileno(), size)
        view = memoryview(data)
        t0 = time.perf_counter()
        for pos in range(0, size, chunk):
            end = min(pos + chunk, size)
            mm[pos:end] = view[pos:end]
        elapsed = time.perf_counter() - t0
        mm.close()
    path.unlink()
    return elapsed


def bench_read(root: Path, body_size: int) -> tuple[float, int, int, float]:
    """Returns (seconds, rows, commit-log bytes, raw scan seconds)."""
    topic = f"Bench{body_size}"
    with MessageStore.open(root, read_only=True) as store:
        rows = 0
        t0 = time.perf_counter()
        for q in store.queue_ids(topic):
            for rb in store.read_range(topic, q, store.min_offset(topic, q), store.max_offset(topic, q)):
                rows += rb.num_rows
        elapsed = time.perf_counter() - t0
        lo, hi = store.commit_log_min_offset(), store.commit_log_max_offset()
    raw_s = _raw_scan(root / "commitlog", lo, hi)
    return elapsed, rows, hi - lo, raw_s


def _raw_scan(commitlog: Path, lo: int, hi: int) -> float:
    files = sorted(p for p in commitlog.iterdir() if p.name.isdigit())
    t0 = time.perf_counter()
    total = 0
    for p in files:
        with open(p, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            start = int(p.name)
            a, b = max(lo - start, 0), min(hi - start, len(mm))
            for pos in range(a, b, 4 << 20):
                total += len(mm[pos : min(pos + (4 << 20), b)])
            mm.close()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rs-bench-", dir=args.dir))
    try:
        print(f"{'case':28} {'ours MB/s':>10} {'raw MB/s':>10} {'ratio':>7}  {'ours msg/s':>12}")
        for body_size in (256, 4096):
            root = base / f"store-{body_size}"
            n = args.messages if body_size == 256 else max(args.messages // 8, 1000)
            secs, nbytes, raw_s = bench_append(root, n, body_size, args.batch)
            mb, raw_mb = nbytes / secs / 1e6, nbytes / raw_s / 1e6
            print(f"{'append ' + str(body_size) + ' B, batch ' + str(args.batch):28} {mb:10.1f} {raw_mb:10.1f} "
                  f"{mb / raw_mb:7.2f}  {n / secs:12,.0f}")
            secs, rows, nbytes, raw_s = bench_read(root, body_size)
            mb, raw_mb = nbytes / secs / 1e6, nbytes / raw_s / 1e6
            print(f"{'read to Arrow ' + str(body_size) + ' B':28} {mb:10.1f} {raw_mb:10.1f} {mb / raw_mb:7.2f}  "
                  f"{rows / secs:12,.0f}")
            shutil.rmtree(root)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
