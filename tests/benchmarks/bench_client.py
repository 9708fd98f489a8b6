"""Client benchmark: our Python client against the Java 4.9.8 client, on the same broker and machine, for each
broker in turn (the real Apache RocketMQ 4.9.8 broker, then ours: `rocketstream serve`), with ratios ours/java.

    python tests/benchmarks/bench_client.py [--send 5000] [--batch 50000] [--drain 50000] [--threads 8]
                                            [--size 1024] [--flow-seconds 20] [--full] [--only java|ours]
                                            [--lite-batch 32] [--lite-default] [--json FILE] [--dir DIR] [--keep]

Per broker (fresh store, tests/benchmarks/bench_broker.py's start_java/start_ours and settings):
  1. send     ``--send`` sync sends of ``--size`` bytes from ``--threads`` threads sharing one producer:
              Java = tests/java/LoadGen.java ``send``, ours = tests/benchmarks/client_worker.py ``send``;
  2. batch    ``--batch`` messages in batches of 32 from ``--threads`` threads (``send(Collection)`` /
              ``Producer.send_batch``);
  3. drain    a topic filled with ``--drain`` messages (by the Java batch producer) is drained, each from the
              first offset in a new group, by the Java push consumer (LoadGen ``consume``), our PushConsumer with a
              no-op listener and our LitePullConsumer: msgs/s from the first message to the last. The lite
              consumer pulls ``--lite-batch`` (32, the Java push consumer's pullBatchSize) messages per request;
              ``--lite-default`` adds a drain with its default (DefaultLitePullConsumer.pullBatchSize 10);
  4. flow     our PushConsumer with a listener sleeping 10 ms on a backlog of ``--flow-backlog`` messages for
              ``--flow-seconds``: the largest ProcessQueue seen (messages, bytes) against pullThresholdForQueue
              (+ one pull batch, since the check is made before each pull) and the RSS series (flat = bounded).
For send and batch also each client process's CPU (user + sys) per message, start-up included (the JVM's,
our imports): a figure the machine's load hardly moves, unlike msgs/s. Every client runs in its own process.
``--full`` is the issue's setting: a 1 M x 1 KiB drain (200,000 sends,
800,000 batched). Goals (issue 9): producer >= 0.5x Java, push consumer >= 0.5x, lite pull >= 1.0x.

The default sizes are a smoke run (a few minutes): the JVM is still warming up, so its numbers, and the ratios,
flatter us; quote ratios from ``--full`` (or at least ``--send 30000 --batch 200000 --drain 200000``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks.bench_broker import (  # noqa: E402
    BenchError,
    compile_loadgen,
    cpu_seconds,
    loadgen,
    start_java,
    start_ours,
    stop,
)
from tests.realbroker import peers  # noqa: E402

WORKER = REPO / "tests" / "benchmarks" / "client_worker.py"


def worker(*args: str, timeout: float) -> dict:
    """Run client_worker.py; its JSON result (BenchError with its output when it printed none)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, str(WORKER), *args], capture_output=True, text=True, timeout=timeout,
                         env=env)
    lines = [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]
    if not lines:
        raise BenchError(f"client_worker {' '.join(args[:3])} printed no result (exit {res.returncode}):\n"
                         f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
    out = lines[-1]
    out["process_s"] = round(time.monotonic() - t0, 2)
    if not out.get("ok"):
        print(f"  WARNING: client_worker {args[0]} reported a failure: {json.dumps(out)[:500]}\n{res.stderr[-1500:]}",
              file=sys.stderr)
    return out


def _with_cpu(fn) -> dict:
    """``fn()`` (a loadgen / worker call: one child process, waited for) with that process's CPU (user + sys,
    RUSAGE_CHILDREN) per message it sent, start-up (JVM / imports) included: ``cpu_us_per_msg``. Unlike msgs/s,
    CPU time hardly moves with the machine's load, so the Java client and ours compare on a shared machine."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = fn()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    msgs = out.get("msgs", 0) + out.get("warmup_msgs", 0)
    if msgs:
        cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
        out["cpu_us_per_msg"] = round(1e6 * cpu / msgs, 1)
    return out


def _safe(fn, what: str) -> dict:
    try:
        return fn()
    except (BenchError, subprocess.TimeoutExpired) as exc:
        print(f"  {what} FAILED: {exc}", file=sys.stderr)
        return {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}


def run_side(name: str, classes: Path, home: Path, args: argparse.Namespace) -> dict:
    side_home = home / name
    side_home.mkdir()
    print(f"[{name}] starting broker ...", file=sys.stderr)
    running = start_java(side_home) if name == "java" else start_ours(side_home)
    cpu0 = sum(cpu_seconds(p.pid) for p in running.procs)
    ns = running.namesrv_addr
    to = args.timeout
    common = ["--threads", str(args.threads), "--size", str(args.size)]
    r: dict = {}
    try:
        print(f"[{name}] send {args.send} (java, then ours) ...", file=sys.stderr)
        r["send_java"] = _safe(lambda: _with_cpu(lambda: loadgen(classes, side_home, "send", ns, "CBSendJ", "--count",
                                                                 str(args.send), *common, timeout=to)), "java send")
        r["send_ours"] = _safe(lambda: _with_cpu(lambda: worker("send", ns, "CBSendP", "--count", str(args.send),
                                                                *common, timeout=to)), "our send")
        print(f"[{name}] batch {args.batch} ...", file=sys.stderr)
        r["batch_java"] = _safe(lambda: _with_cpu(lambda: loadgen(classes, side_home, "batch", ns, "CBBatchJ",
                                                                  "--count", str(args.batch), "--batch", "32", *common,
                                                                  timeout=to)), "java batch")
        r["batch_ours"] = _safe(lambda: _with_cpu(lambda: worker("batch", ns, "CBBatchP", "--count", str(args.batch),
                                                                 "--batch", "32", *common, timeout=to)), "our batch")
        print(f"[{name}] filling the drain topic with {args.drain} ...", file=sys.stderr)
        fill = loadgen(classes, side_home, "batch", ns, "CBDrain", "--count", str(args.drain), "--batch", "32",
                       *common, timeout=to)
        total = fill["msgs"] + fill["warmup_msgs"]
        print(f"[{name}] drain {total}: java push, our push, our lite pull ...", file=sys.stderr)
        r["drain_java"] = _safe(lambda: loadgen(classes, side_home, "consume", ns, "CBDrain", "CBDrainJava", "--count",
                                                str(total), "--timeout-s", str(int(to)), timeout=to + 60), "java drain")
        r["drain_push"] = _safe(lambda: worker("push", ns, "CBDrain", "CBDrainPush", "--count", str(total),
                                               "--timeout-s", str(to), timeout=to + 60), "our push drain")
        r["drain_lite"] = _safe(lambda: worker("lite", ns, "CBDrain", "CBDrainLite", "--count", str(total),
                                               "--timeout-s", str(to), "--pull-batch", str(args.lite_batch),
                                               timeout=to + 60), "our lite drain")
        if args.lite_default:
            r["drain_lite10"] = _safe(lambda: worker("lite", ns, "CBDrain", "CBDrainLite10", "--count", str(total),
                                                     "--timeout-s", str(to), timeout=to + 60),
                                      "our lite drain (default pull batch)")
        print(f"[{name}] flow control: {args.flow_backlog} backlog, listener sleeping 10 ms, "
              f"{args.flow_seconds} s ...", file=sys.stderr)
        loadgen(classes, side_home, "batch", ns, "CBFlow", "--count", str(args.flow_backlog), "--batch", "32",
                *common, timeout=to)
        r["flow"] = _safe(lambda: worker("flow", ns, "CBFlow", "CBFlowG", "--seconds", str(args.flow_seconds),
                                         "--sleep-ms", "10", timeout=args.flow_seconds + 120), "flow")
        r["server_cpu_s"] = round(sum(cpu_seconds(p.pid) for p in running.procs) - cpu0, 1)
    finally:
        stop(running)
    return r


ROWS = [
    ("send msgs/s (sync 1 KiB)", "send_java", "send_ours", "msgs_per_s", 0.5),
    ("send rt p50 µs", "send_java", "send_ours", "rt_us_p50", None),
    ("send rt p99 µs", "send_java", "send_ours", "rt_us_p99", None),
    ("send client CPU µs/msg (lower)", "send_java", "send_ours", "cpu_us_per_msg", None),
    ("batch msgs/s (32 x 1 KiB)", "batch_java", "batch_ours", "msgs_per_s", 0.5),
    ("batch client CPU µs/msg (lower)", "batch_java", "batch_ours", "cpu_us_per_msg", None),
    ("push drain msgs/s", "drain_java", "drain_push", "msgs_per_s", 0.5),
    ("lite-pull drain msgs/s", "drain_java", "drain_lite", "msgs_per_s", 1.0),
    ("lite-pull, pullBatchSize 10", "drain_java", "drain_lite10", "msgs_per_s", None),
]


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and v >= 100:
        return f"{v:,.0f}"
    return f"{v:,}" if isinstance(v, int) else f"{v:.2f}"


def table(results: dict) -> str:
    out = []
    for broker, res in results.items():
        out.append(f"\nbroker: {broker}")
        if isinstance(res, str):
            out.append(f"  FAILED: {res}")
            continue
        out.append(f"  {'metric':<28}{'java client':>14}{'ours':>14}{'ours/java':>11}{'goal':>7}")
        for label, jk, ok, key, goal in ROWS:
            j, o = res.get(jk, {}).get(key), res.get(ok, {}).get(key)
            ratio = f"{o / j:.2f}" if isinstance(j, (int, float)) and isinstance(o, (int, float)) and j else "n/a"
            out.append(f"  {label:<28}{_fmt(j):>14}{_fmt(o):>14}{ratio:>11}{(f'>={goal}' if goal else ''):>7}")
        fl = res.get("flow", {})
        if "max_queue_msgs" in fl:
            th = fl.get("thresholds", {})
            out.append(f"  flow control (listener 10 ms): max ProcessQueue {fl['max_queue_msgs']} msgs / "
                       f"{fl['max_queue_bytes']:,} B (threshold {th.get('pull_threshold_for_queue')} msgs + one batch "
                       f"= {fl['queue_limit_with_one_batch']}; {th.get('pull_threshold_size_for_queue')} MiB), "
                       f"peak count kept by the ProcessQueues {fl.get('max_count_seen_by_process_queue')}, topic max "
                       f"{fl['max_topic_msgs']} msgs; consumed {fl['consumed']} in {fl['seconds']} s")
            out.append(f"  RSS MiB over time: {fl['rss_mib_series']}  (max first half {fl['rss_mib_first_half_max']}, "
                       f"second half {fl['rss_mib_second_half_max']})")
        elif fl:
            out.append(f"  flow control: {fl}")
        for k, v in res.items():
            if isinstance(v, dict) and "error" in v:
                out.append(f"  {k}: FAILED: {v['error']}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--send", type=int, default=5_000)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--drain", type=int, default=50_000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--flow-seconds", type=float, default=20)
    ap.add_argument("--flow-backlog", type=int, default=30_000)
    ap.add_argument("--lite-batch", type=int, default=32,
                    help="our LitePullConsumer's pull_batch_size in the drain (default 32, the Java push consumer's "
                         "pullBatchSize it is compared with)")
    ap.add_argument("--lite-default", action="store_true",
                    help="also drain with the LitePullConsumer's default pull_batch_size (DefaultLitePullConsumer's "
                         "10)")
    ap.add_argument("--full", action="store_true", help="200,000 sends, 800,000 batched, a 1 M-message drain, "
                    "60 s of flow control")
    ap.add_argument("--only", choices=("java", "ours"), help="one broker only")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if args.full:
        args.send, args.batch, args.drain = 200_000, 800_000, 1_000_000
        args.flow_seconds, args.flow_backlog = 60, 100_000
    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable as exc:
        print(f"cannot run: {exc}", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="bench-client-", dir=args.dir))
    results: dict = {}
    try:
        classes = compile_loadgen(home / "classes")
        for side in ("java", "ours"):
            if args.only and side != args.only:
                continue
            try:
                results[side] = run_side(side, classes, home, args)
            except (BenchError, peers.PeerError, subprocess.TimeoutExpired) as exc:
                results[side] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                print(f"[{side}] FAILED: {exc}", file=sys.stderr)
        meta = {"send": args.send, "batch": args.batch, "drain": args.drain, "threads": args.threads,
                "size": args.size, "cpus": os.cpu_count(), "load_avg": os.getloadavg()}
        print(f"\nclient benchmark: {json.dumps(meta)}")
        print(table(results))
        if args.json:
            args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    finally:
        if args.keep:
            print(f"kept {home}", file=sys.stderr)
        else:
            shutil.rmtree(home, ignore_errors=True)
    return 0 if all(isinstance(v, dict) for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
