"""The Python side of tests/benchmarks/bench_client.py: our client, in its own process (as LoadGen.java is for
the Java client), printing one JSON result line like LoadGen's.

    python tests/benchmarks/client_worker.py send  NS TOPIC [--count N] [--threads 8] [--size 1024]
    python tests/benchmarks/client_worker.py batch NS TOPIC [--count N] [--threads 8] [--size 1024] [--batch 32]
    python tests/benchmarks/client_worker.py push  NS TOPIC GROUP --count N [--timeout-s 600]
    python tests/benchmarks/client_worker.py lite  NS TOPIC GROUP --count N [--timeout-s 600] [--pull-batch 32]
    python tests/benchmarks/client_worker.py flow  NS TOPIC GROUP [--seconds 20] [--sleep-ms 10]

send/batch: one Producer shared by --threads threads (after warm-up calls), msgs/s and round trip p50/p99 µs.
push: a PushConsumer with a no-op listener drains --count messages from the first offset; lite: the same with a
LitePullConsumer (poll until --count;
``--pull-batch``: its pull_batch_size, default DefaultLitePullConsumer's 10). msgs/s is counted from the first
message to the last, as LoadGen does; drain_cpu_us_per_msg is this process's CPU over the same span (all threads,
without the start-up and imports that the whole process's CPU includes).
flow: a PushConsumer whose listener sleeps --sleep-ms per call; every 100 ms the ProcessQueues' message counts
and sizes are sampled (max per queue, max over the topic) and, every second, this process's RSS; reported with
the thresholds in force.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _by_thread_group(file: str, value: Callable[[str], float]) -> dict[str, float]:
    """``value`` of each live thread's /proc/self/task/<tid>/``file``, summed by the thread's Python name with
    trailing digits and '_' dropped (threads Python did not start: ``other``)."""
    names = {t.native_id: t.name.rstrip("0123456789_") for t in threading.enumerate()}
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            text = (task / file).read_text()
        except OSError:   # the thread ended meanwhile
            continue
        name = names.get(int(task.name), "other")
        out[name] = out.get(name, 0) + value(text)
    return out


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user+sys) of this process's live threads (stat's utime + stime), by thread group."""
    tick = os.sysconf("SC_CLK_TCK")

    def cpu(stat: str) -> float:
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / tick
    return _by_thread_group("stat", cpu)


def thread_switches() -> dict[str, float]:
    """Context switches (voluntary + involuntary, status's ctxt_switches) of this process's live threads, by
    thread group as in :func:`thread_cpu`: a consume thread that waits for a lock or the GIL inside its task
    switches many times per pulled batch instead of about once."""
    return _by_thread_group("status", lambda status: sum(
        int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line))


def thread_cpu_us(before: dict[str, float], after: dict[str, float], count: int) -> dict[str, float]:
    """CPU µs per message by thread group between two :func:`thread_cpu` samples."""
    return {k: round(1e6 * (v - before.get(k, 0.0)) / count, 2) for k, v in sorted(after.items())
            if count and v - before.get(k, 0.0) > 0}


def pct(sorted_vals: list[float], p: float) -> float:
    if not sorted_vals:
        return 0.0
    i = max(0, min(len(sorted_vals) - 1, int(-(-p / 100 * len(sorted_vals) // 1)) - 1))
    return sorted_vals[i]


def api(*mods: str):
    """The client's public names from rocketstream.client.<mods> (+ common): imported per mode, so the producer
    modes run before the consumer modules exist."""
    import importlib
    ns = argparse.Namespace()
    for name in (*mods, "common", "rebalance", "consume_service"):
        mod = importlib.import_module(f"rocketstream.client.{name}")
        for k in dir(mod):
            if not k.startswith("_") and not hasattr(ns, k):
                setattr(ns, k, getattr(mod, k))
    return ns


def from_first(a) -> dict:
    return {"consume_from_where": a.CONSUME_FROM_FIRST_OFFSET}


# --- producers ---------------------------------------------------------------------------------------------
def send(args, batch: bool) -> dict:
    a = api("producer")
    body = random.Random(42).randbytes(args.size)
    p = a.Producer("PyLoadGenProducer", namesrv=args.ns)
    p.start()
    bsize = args.batch if batch else 1
    errors = [0]
    first_error: list[str] = []

    def call() -> None:
        try:
            if bsize == 1:
                r = p.send(args.topic, body, tags="TagL")
            else:
                r = p.send_batch(args.topic, [a.Message(args.topic, body, tags="TagL") for _ in range(bsize)])
            if r.status.name != "SEND_OK":
                errors[0] += 1
                first_error.append(str(r.status))
        except Exception as exc:   # counted and reported, like LoadGen.callOnce
            errors[0] += 1
            first_error.append(repr(exc))

    warmup = args.warmup if args.warmup is not None else (100 if batch else 2000)
    for _ in range(warmup):
        call()
    warm_errors = errors[0]
    errors[0] = 0
    calls_total = -(-args.count // bsize)
    counter = iter(range(calls_total))
    lock = threading.Lock()
    rts: list[list[float]] = []

    def worker() -> None:
        mine: list[float] = []
        rts.append(mine)
        while True:
            with lock:
                if next(counter, None) is None:
                    return
            s = time.perf_counter()
            call()
            mine.append((time.perf_counter() - s) * 1e6)

    threads = [threading.Thread(target=worker) for _ in range(args.threads)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    p.shutdown()
    allrt = sorted(x for r in rts for x in r)
    msgs = (calls_total - errors[0]) * bsize
    return {"threads": args.threads, "size": args.size, "batch": bsize, "msgs": msgs, "calls": calls_total,
            "warmup_msgs": (warmup - warm_errors) * bsize, "errors": errors[0],
            "first_error": first_error[0] if first_error else None, "seconds": round(secs, 3),
            "msgs_per_s": round(msgs / secs, 1), "rt_us_p50": round(pct(allrt, 50)), "rt_us_p99": round(pct(allrt, 99)),
            "rss_mib": round(rss_mib(), 1), "ok": errors[0] == 0}


# --- consumers ---------------------------------------------------------------------------------------------
def push(args) -> dict:
    a = api("push_consumer")
    # The listener does what LoadGen's does: count every message with an atomic add (itertools.count's next()
    # is one C call under the GIL, as AtomicLong.addAndGet) and read every body's length; the clocks are read
    # only at the first and the last message. A threading.Lock taken per call, as before, made the consume
    # threads queue on it whenever several ran at once (each one holding it could lose the GIL).
    counter = itertools.count(1)
    sizes: list[int] = []   # body bytes per listener call (list.append: atomic under the GIL as well)
    first = [0.0]
    last = [0.0]
    cpu = [0.0, 0.0]   # process CPU seconds at the first and the last message
    threads: list[dict[str, float]] = [{}, {}]   # thread_cpu() at the first and the last message
    switches: list[dict[str, float]] = [{}, {}]   # thread_switches() at the first and the last message
    done = threading.Event()
    lock = threading.Lock()   # only around the first and the last message's clock readings
    success = a.ConsumeConcurrentlyStatus.CONSUME_SUCCESS
    count = args.count

    def listener(msgs, context=None):
        n = nbytes = 0
        for m in msgs:
            n = next(counter)
            nbytes += len(m.body)
        sizes.append(nbytes)
        if not first[0]:
            now = time.perf_counter()
            with lock:
                if not first[0]:
                    first[0] = now
                    cpu[0] = time.process_time()
                    threads[0] = thread_cpu()
                    switches[0] = thread_switches()
        if n >= count and not last[0]:
            now = time.perf_counter()
            with lock:
                if not last[0]:
                    last[0] = now
                    cpu[1] = time.process_time()
                    threads[1] = thread_cpu()
                    switches[1] = thread_switches()
                    done.set()
        return success

    c = a.PushConsumer(args.group, namesrv=args.ns, **from_first(a))
    c.subscribe(args.topic, "*")
    c.register_message_listener_concurrently(listener)
    t0 = time.perf_counter()
    c.start()
    done.wait(args.timeout_s)
    end = last[0] or time.perf_counter()
    c.shutdown()
    got = next(counter) - 1   # the consume threads have ended: every message counted
    secs = end - first[0] if first[0] else 0
    tasks = getattr(c.consume_service.executor, "tasks", None)
    return {"msgs": got, "expected": args.count, "seconds": round(secs, 3), "wall_seconds": round(end - t0, 3),
            "flow_control_times": c.flow_control_times, "consume_tasks": tasks,
            "msgs_per_consume_task": round(got / tasks, 1) if tasks else None,
            "msgs_per_s": round(got / secs, 1) if secs else 0,
            "mib_per_s": round(sum(sizes) / secs / (1 << 20), 1) if secs else 0, "rss_mib": round(rss_mib(), 1),
            "drain_cpu_us_per_msg": round(1e6 * (cpu[1] - cpu[0]) / got, 2) if cpu[1] else None,
            "drain_thread_cpu_us_per_msg": thread_cpu_us(*threads, got) if cpu[1] else None,
            "drain_thread_switches_per_task": {k: round((v - switches[0].get(k, 0)) / tasks, 2)
                                               for k, v in sorted(switches[1].items())} if cpu[1] and tasks else None,
            "ok": got >= args.count}


def lite(args) -> dict:
    a = api("lite_pull")
    kw = {"pull_batch_size": args.pull_batch} if args.pull_batch else {}
    c = a.LitePullConsumer(args.group, namesrv=args.ns, **from_first(a), **kw)
    c.subscribe(args.topic, "*")
    t0 = time.perf_counter()
    c.start()
    got = 0
    first = 0.0
    cpu0 = 0.0
    threads0: dict[str, float] = {}
    nbytes = 0
    deadline = time.monotonic() + args.timeout_s
    while got < args.count and time.monotonic() < deadline:
        msgs = c.poll(1.0)
        if msgs and not first:
            first = time.perf_counter()
            cpu0 = time.process_time()
            threads0 = thread_cpu()
        got += len(msgs)
        for m in msgs:
            nbytes += len(m.body)
    end = time.perf_counter()
    cpu1 = time.process_time()
    threads1 = thread_cpu()
    c.shutdown()
    secs = end - first if first else 0
    return {"msgs": got, "expected": args.count, "seconds": round(secs, 3), "wall_seconds": round(end - t0, 3),
            "msgs_per_s": round(got / secs, 1) if secs else 0,
            "mib_per_s": round(nbytes / secs / (1 << 20), 1) if secs else 0,
            "pull_batch_size": c.config.pull_batch_size,
            "drain_cpu_us_per_msg": round(1e6 * (cpu1 - cpu0) / got, 2) if got else None,
            "drain_thread_cpu_us_per_msg": thread_cpu_us(threads0, threads1, got) if got else None,
            "rss_mib": round(rss_mib(), 1), "ok": got >= args.count}


def process_queues(c) -> dict:
    """The consumer's {MessageQueue: ProcessQueue} (RebalanceImpl.processQueueTable)."""
    for path in (("rebalance", "process_queue_table"), ("rebalance_impl", "process_queue_table"),
                 ("_rebalance", "process_queue_table"), ("process_queue_table",)):
        obj = c
        try:
            for p in path:
                obj = getattr(obj, p)
        except AttributeError:
            continue
        return dict(obj)
    raise AttributeError("cannot find the PushConsumer's process queue table")


def _pq_count_size(pq) -> tuple[int, int]:
    n = getattr(pq, "msg_count", None)
    s = getattr(pq, "msg_size", None)
    n = n() if callable(n) else n
    s = s() if callable(s) else s
    return int(n), int(s)


def flow(args) -> dict:
    a = api("push_consumer")
    consumed = [0]

    def listener(msgs, context=None):
        time.sleep(args.sleep_ms / 1000)
        consumed[0] += len(msgs)
        return a.ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = a.PushConsumer(args.group, namesrv=args.ns, **from_first(a))
    c.subscribe(args.topic, "*")
    c.register_message_listener_concurrently(listener)
    c.start()
    thresholds = {k: getattr(c.config, k, None) for k in ("pull_threshold_for_queue", "pull_threshold_size_for_queue",
                                                   "pull_threshold_for_topic", "pull_threshold_size_for_topic",
                                                   "pull_batch_size", "consume_thread_max",
                                                   "consume_concurrently_max_span")}
    max_q_count = max_q_size = max_t_count = max_t_size = peak = 0
    rss: list[tuple[float, float]] = []
    samples = 0
    t0 = time.monotonic()
    next_rss = t0
    while time.monotonic() - t0 < args.seconds:
        pqs = process_queues(c)
        tc = ts = 0
        for pq in pqs.values():
            peak = max(peak, int(getattr(pq, "max_count_seen", 0)))
            n, s = _pq_count_size(pq)
            max_q_count, max_q_size = max(max_q_count, n), max(max_q_size, s)
            tc += n
            ts += s
        max_t_count, max_t_size = max(max_t_count, tc), max(max_t_size, ts)
        samples += 1
        if time.monotonic() >= next_rss:
            rss.append((round(time.monotonic() - t0, 1), round(rss_mib(), 1)))
            next_rss += 1.0
        time.sleep(0.1)
    c.shutdown()
    half = [r for _, r in rss[len(rss) // 2:]] or [0.0]
    first_half = [r for _, r in rss[: max(1, len(rss) // 2)]] or [0.0]
    limit = (thresholds.get("pull_threshold_for_queue") or 1000) + (thresholds.get("pull_batch_size") or 32)
    return {"seconds": args.seconds, "sleep_ms": args.sleep_ms, "consumed": consumed[0], "samples": samples,
            "max_queue_msgs": max_q_count,
            "max_queue_bytes": max_q_size,
            "max_count_seen_by_process_queue": peak, "max_topic_msgs": max_t_count, "max_topic_bytes": max_t_size,
            "thresholds": thresholds, "queue_limit_with_one_batch": limit, "rss_mib_series": rss,
            "rss_mib_first_half_max": max(first_half), "rss_mib_second_half_max": max(half),
            "ok": max(max_q_count, peak) <= limit}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("send", "batch", "push", "lite", "flow"))
    ap.add_argument("ns")
    ap.add_argument("topic")
    ap.add_argument("group", nargs="?")
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--pull-batch", type=int, help="lite: pull_batch_size (default: the consumer's)")
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--sleep-ms", type=float, default=10)
    args = ap.parse_args()
    if args.mode in ("push", "lite", "flow") and not args.group:
        ap.error(f"{args.mode} needs GROUP")
    fn = {"send": lambda: send(args, False), "batch": lambda: send(args, True), "push": lambda: push(args),
          "lite": lambda: lite(args), "flow": lambda: flow(args)}[args.mode]
    out = fn()
    out["mode"] = args.mode
    out["pid"] = os.getpid()
    emit(out)
    return 0 if out.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
