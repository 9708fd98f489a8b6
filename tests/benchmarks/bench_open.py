"""Store open benchmark: how long a read-only open and a writer open (recovery) take as the store
grows, after a clean shutdown and after a crash (``abort`` present), with a reference measured in
the same run.

    python tests/benchmarks/bench_open.py [--sizes-gib 1 4 10] [--queues 1024] [--body 4096] [--repeat 3] [--dir /tmp]

Each store is built once per size (1 GiB commit-log files, ``--queues`` queues of one topic,
distinct incompressible ``--body``-byte bodies, written with the columnar ``put_batch``), then:

* ``read-only``: ``MessageStore.open(root, read_only=True)`` + close;
* ``writer, clean``: ``MessageStore.open(root)`` + close after a clean shutdown (normal recovery:
  ``CommitLog.recoverNormally`` scans from the third-to-last commit-log file with CRC checks);
* ``writer, abort``: the same with an ``abort`` file (abnormal recovery from the checkpoint's file,
  re-dispatching every record from there).

Reference: what Java's normal recovery must at least read — CRC32 over the used bytes of the last
three commit-log files, in 4 MiB chunks, plus one read of the used part of every queue's last consume-queue file.
The ratio is reference time / ours (1.0 = as cheap as reading those bytes once). Page cache warm:
best of ``--repeat`` after one untimed open. Data lives in a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from rocketstream.codec import crc32
from rocketstream.store import MessageStore, StoreConfig

FILE_SIZE = 1 << 30
TOPIC = "BenchOpen"


def build(root: Path, gib: float, queues: int, body: int) -> int:
    """Fill a store with about ``gib`` GiB of records; returns the number of messages."""
    config = StoreConfig(root, mapped_file_size_commit_log=FILE_SIZE, mapped_file_size_consume_queue=6_000_000)
    pool = np.random.default_rng(7).integers(0, 256, size=64 << 20, dtype=np.uint8).tobytes()
    view = memoryview(pool)
    per_batch = 64
    target = int(gib * (1 << 30))
    written = messages = 0
    step = 4099
    at = 0
    with MessageStore.open(root, config=config) as store:
        q = 0
        while written < target:
            bodies = []
            for _ in range(per_batch):
                at = (at + step) % (len(pool) - body)
                bodies.append(view[at:at + body])
            r = store.put_batch(TOPIC, q, bodies, tags="TagA")
            if not r.ok:
                raise SystemExit(f"put failed: {r}")
            written += r.wrote_bytes
            messages += per_batch
            q = (q + 1) % queues
    return messages


def reference(root: Path) -> float:
    start = time.perf_counter()
    files = sorted(os.listdir(root / "commitlog"))[-3:]
    for name in files:
        with open(root / "commitlog" / name, "rb") as f:
            while chunk := f.read(4 << 20):
                if not any(chunk[:8]):   # the unwritten tail of the last file
                    break
                crc32(chunk)
    cq = root / "consumequeue" / TOPIC
    for q in os.listdir(cq):
        last = sorted(os.listdir(cq / q))[-1]
        with open(cq / q / last, "rb") as f:   # the used units: up to the first 4 KiB of zeros
            while (page := f.read(4096)) and any(page[-20:]):
                pass
    return time.perf_counter() - start


def timed(fn, repeat: int) -> float:
    fn()   # warm-up, untimed
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-gib", type=float, nargs="+", default=[1, 4, 10])
    ap.add_argument("--queues", type=int, default=1024)
    ap.add_argument("--body", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench_open_", dir=args.dir))
    try:
        print(f"{'store':>8} {'messages':>10} {'open':>14} {'seconds':>8} {'reference s':>12} {'ratio':>6}")
        root = base / "store"
        built = 0.0
        messages = 0
        for gib in sorted(args.sizes_gib):
            t0 = time.perf_counter()
            messages += build(root, gib - built, args.queues, args.body)   # grow the same store
            built = gib
            print(f"# built {gib:g} GiB in {time.perf_counter() - t0:.1f} s", flush=True)
            ref = timed(lambda: reference(root), args.repeat)

            def open_close(read_only: bool, abort: bool) -> None:
                if abort:
                    (root / "abort").touch()
                MessageStore.open(root, read_only=read_only).close()

            for label, ro, abort in (("read-only", True, False), ("writer, clean", False, False),
                                     ("writer, abort", False, True)):
                secs = timed(lambda: open_close(ro, abort), args.repeat)  # noqa: B023 - timed now
                print(f"{gib:>6g} G {messages:>10} {label:>14} {secs:>8.3f} {ref:>12.3f} {ref / secs:>6.2f}",
                      flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
