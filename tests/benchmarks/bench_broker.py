"""Broker benchmark: the same Java load generator (tests/java/LoadGen.java, the 4.9.8 client) against
the real Apache RocketMQ 4.9.8 broker and against ours (`rocketstream serve`), one after the other on
this machine, with the same settings, then a table of ratios.

    python tests/benchmarks/bench_broker.py [--send 50000] [--batch 200000] [--latency 2000]
                                            [--threads 8] [--size 1024] [--full] [--only java|ours]
                                            [--json FILE] [--dir DIR] [--keep] [--py-spy DIR]

For each broker, on a fresh store (1 GiB commit-log files, ASYNC_FLUSH, default delay levels):
  1. send     ``--send`` sync sends of ``--size`` bytes from ``--threads`` threads sharing one producer
              (after 2,000 warm-up sends): msgs/s, send round trip p50/p99;
  2. batch    ``--batch`` messages as send(Collection) of 32 per call from ``--threads`` threads: msgs/s;
  3. consume  a push consumer in a new group drains the whole topic (everything 1 and 2 wrote, warm-ups
              included): msgs/s from its first message to the last;
  4. latency  ``--latency`` messages sent one every 2 ms to a waiting push consumer (its pulls held by
              the broker: long polling): produce-to-consume p50/p99 in ms (System.nanoTime() in the body).
``--full`` is the issue's setting: 200,000 sends + 800,000 batched = a push consumer draining 1 M
messages. The Java broker is 4.9.8 from ../shared/rocketmq-4.9.8 (tests/realbroker/peers.py
broker_command: the JVM flags of that distribution's bin/broker, SerialGC, -Xmx512m); ours is
``python -m rocketstream.cli serve`` with a conf file of the same RocketMQ properties. Ratios are ours/java,
so > 1 is better for throughput and worse for latency.
Goals (issue 11): send and consume ≥ 0.5× the Java broker's; p50 latency ≤ 5 ms.

The two brokers never run at the same time. Each server's CPU time (user+sys) over the whole run is
reported, since the load generator and the broker share this machine's cores, and per message of each
phase for the servers and for the load generator (its process's rusage). "server run wait" is how long
the server's threads waited runnable for a core over the batch phase (/proc/PID/task/*/schedstat): on a shared
machine a one-loop broker whose wait exceeds its CPU time is starved by the load, not slow by its own work.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.realbroker import peers  # noqa: E402

TOPIC = "BenchTopic"
GROUP = "BenchGroup"
COMMITLOG_FILE_SIZE = 1 << 30
CQ_FILE_SIZE = 300_000 * 20
COMMON_CONF = {
    "flushDiskType": "ASYNC_FLUSH",
    "mappedFileSizeCommitLog": str(COMMITLOG_FILE_SIZE),
    "mappedFileSizeConsumeQueue": str(CQ_FILE_SIZE),
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
}


class BenchError(RuntimeError):
    """A broker did not start, or the load generator failed (the message says which and why)."""


@dataclass
class Running:
    name: str
    namesrv_addr: str
    procs: list[subprocess.Popen]
    logs: list[Path]


def compile_loadgen(outdir: Path) -> Path:
    try:
        return peers.compile_java(outdir, REPO / "tests" / "java" / "LoadGen.java")
    except peers.PeerError as exc:
        raise BenchError(str(exc)) from exc


def cpu_seconds(pid: int) -> float:
    """user+sys CPU seconds of a live process and its waited-for children (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(f) for f in fields[11:15]) / ticks


def run_delay_seconds(pid: int) -> float:
    """Seconds the process's threads have waited runnable for a CPU (/proc/PID/task/*/schedstat, second field):
    a server that waits long for a core is starved by the machine's load, not slow on its own."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return float("nan")
    for task in tasks:
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue   # a thread that ended meanwhile
    return total / 1e9


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def start_java(home: Path) -> Running:
    namesrv = peers.start_namesrv(home)
    namesrv.wait_ready("boot success")
    port = peers.free_port((-2, 0, 1))
    bhome = home / "java-broker"
    bhome.mkdir(parents=True)
    argv = peers.broker_command(bhome, port, f"{peers.BIND}:{namesrv.port}", extra_conf=COMMON_CONF,
                                commitlog_file_size=COMMITLOG_FILE_SIZE, cq_file_size=CQ_FILE_SIZE, heap="512m")
    log = bhome / "broker.out"
    proc = peers._spawn(argv, peers.server_env(peers.find_dist()), log)
    peers.Server("java broker", proc, log, port).wait_ready("boot success")
    return Running("java", f"{peers.BIND}:{namesrv.port}", [proc, namesrv.proc], [log, namesrv.log])


def start_ours(home: Path) -> Running:
    store = home / "ours-store"
    conf = home / "ours-broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in COMMON_CONF.items()))
    port = peers.free_port()
    ns_port = peers.free_port()
    log = home / "ours.log"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = peers._spawn([sys.executable, "-m", "rocketstream.cli", "serve", "--store", str(store),
                         "--listen", f"{peers.BIND}:{port}", "--namesrv-listen", f"{peers.BIND}:{ns_port}",
                         "--conf", str(conf)], env, log)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        text = log.read_text(errors="replace")
        if any("The broker[" in line and "boot success" in line for line in text.splitlines()):
            return Running("ours", f"{peers.BIND}:{ns_port}", [proc], [log])
        if proc.poll() is not None:
            raise BenchError(f"`rocketstream serve` exited with {proc.returncode} before 'boot success':\n"
                             + "\n".join(text.splitlines()[-25:]))
        time.sleep(0.1)
    proc.kill()
    raise BenchError("`rocketstream serve` not ready after 60 s:\n" + "\n".join(log.read_text().splitlines()[-25:]))


def stop(running: Running) -> None:
    for proc in running.procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        peers._forget(proc)


def loadgen(classes: Path, home: Path, *args: str, timeout: float) -> dict:
    java, _ = peers.find_java()
    dist = peers.find_dist()
    cmd = [str(java), "-Xmx1g", "-Dfile.encoding=UTF-8", f"-Duser.home={home}",
           f"-Drocketmq.client.logRoot={home}/client-logs", "-cp", f"{classes}:{dist}/lib/*", "LoadGen", *args]
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    results = [x for x in lines if "event" not in x]
    if not results:
        raise BenchError(f"LoadGen {' '.join(args[:3])} printed no result (exit {res.returncode}):\n"
                         f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
    out = results[-1]
    out["process_s"] = round(time.monotonic() - t0, 2)
    if not out.get("ok"):
        print(f"  WARNING: LoadGen {args[0]} reported a failure: {out}", file=sys.stderr)
    return out


def start_py_spy(running: Running, out_dir: Path | None, phase: str) -> subprocess.Popen | None:
    """``--py-spy DIR``: sample our broker (not the Java one) over one phase into DIR/ours-PHASE.txt, py-spy's
    raw (collapsed stacks) format; None when not asked or not ours."""
    if out_dir is None or running.name != "ours":
        return None
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise BenchError("--py-spy: no py-spy next to this Python or on PATH (pip install py-spy)")
    out_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([spy, "record", "--pid", str(running.procs[0].pid), "--format", "raw", "--rate", "250",
                             "--nonblocking", "--output", str(out_dir / f"ours-{phase}.txt")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def stop_py_spy(spy: subprocess.Popen | None) -> None:
    """Stop sampling (SIGINT: py-spy writes its file) and wait for the file."""
    if spy is None:
        return
    spy.send_signal(signal.SIGINT)
    try:
        _, err = spy.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait()
        raise BenchError("py-spy did not stop within 60 s of SIGINT") from None
    if spy.returncode not in (0, -signal.SIGINT):
        print(f"  WARNING: py-spy exited with {spy.returncode}: {err.strip()[-500:]}", file=sys.stderr)


def run_side(name: str, classes: Path, home: Path, args: argparse.Namespace) -> dict:
    side_home = home / name
    side_home.mkdir()
    print(f"[{name}] starting broker ...", file=sys.stderr)
    running = start_java(side_home) if name == "java" else start_ours(side_home)
    cpu0 = sum(cpu_seconds(p.pid) for p in running.procs)
    ns = running.namesrv_addr
    res: dict = {}
    try:
        common = ["--threads", str(args.threads), "--size", str(args.size)]

        def phase(key: str, *argv: str, timeout: float) -> None:
            """One LoadGen run; also the servers' CPU time over it (per message when it reports a count)."""
            print(f"[{name}] {key} {argv[argv.index('--count') + 1]} ...", file=sys.stderr)
            spy = start_py_spy(running, args.py_spy, key)
            before = sum(cpu_seconds(p.pid) for p in running.procs)
            waited = sum(run_delay_seconds(p.pid) for p in running.procs)
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                res[key] = out = loadgen(classes, side_home, key, ns, *argv, timeout=timeout)
            finally:
                used = sum(cpu_seconds(p.pid) for p in running.procs) - before
                waited = sum(run_delay_seconds(p.pid) for p in running.procs) - waited
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                stop_py_spy(spy)
            client = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
            out["server_cpu_s"], out["client_cpu_s"] = round(used, 2), round(client, 2)
            out["server_run_delay_s"] = round(waited, 2)
            msgs = (out.get("msgs") or 0) + (out.get("warmup_msgs") or 0)
            if msgs:
                out["server_cpu_us_per_msg"] = round(1e6 * used / msgs, 1)
                out["client_cpu_us_per_msg"] = round(1e6 * client / msgs, 1)

        phase("send", TOPIC, "--count", str(args.send), *common, timeout=args.timeout)
        phase("batch", TOPIC, "--count", str(args.batch), "--batch", "32", *common, timeout=args.timeout)
        total = sum(res[k]["msgs"] + res[k]["warmup_msgs"] for k in ("send", "batch"))
        phase("consume", TOPIC, GROUP, "--count", str(total), "--timeout-s", str(int(args.timeout)),
              timeout=args.timeout + 60)
        phase("latency", TOPIC + "Latency", GROUP + "Latency", "--count", str(args.latency), "--size", str(args.size),
              timeout=args.timeout)
        res["server_cpu_s"] = round(sum(cpu_seconds(p.pid) for p in running.procs) - cpu0, 1)
        res["server_rss_mib"] = round(sum(rss_mib(p.pid) for p in running.procs), 0)
    finally:
        stop(running)
    return res


ROWS = [
    ("send msgs/s (sync, 8 thr)", "send", "msgs_per_s", True),
    ("batch msgs/s (32 x size)", "batch", "msgs_per_s", True),
    ("consume msgs/s (push)", "consume", "msgs_per_s", True),
    ("latency p50 ms", "latency", "p50_ms", False),
    ("latency p99 ms", "latency", "p99_ms", False),
    ("send rt p50 µs", "send", "rt_us_p50", False),
    ("send rt p99 µs", "send", "rt_us_p99", False),
    ("batch rt p50 µs", "batch", "rt_us_p50", False),
    ("batch rt p99 µs", "batch", "rt_us_p99", False),
    ("server CPU µs/msg send", "send", "server_cpu_us_per_msg", False),
    ("server CPU µs/msg batch", "batch", "server_cpu_us_per_msg", False),
    ("server CPU µs/msg consume", "consume", "server_cpu_us_per_msg", False),
    ("LoadGen CPU µs/msg send", "send", "client_cpu_us_per_msg", False),
    ("LoadGen CPU µs/msg batch", "batch", "client_cpu_us_per_msg", False),
    ("server CPU s batch", "batch", "server_cpu_s", False),
    ("server run wait s batch", "batch", "server_run_delay_s", False),
]


def table(results: dict[str, dict | str]) -> str:
    java, ours = results.get("java"), results.get("ours")

    def val(side, sect, key):
        if not isinstance(side, dict):
            return None
        return side.get(sect, {}).get(key)

    lines = [f"{'metric':<28}{'java 4.9.8':>14}{'ours':>14}{'ours/java':>12}"]
    for label, sect, key, _higher_better in ROWS:
        j, o = val(java, sect, key), val(ours, sect, key)
        ratio = f"{o / j:.2f}" if isinstance(j, (int, float)) and isinstance(o, (int, float)) and j else "n/a"
        lines.append(f"{label:<28}{_fmt(j):>14}{_fmt(o):>14}{ratio:>12}")
    for label, key in (("server CPU s (whole run)", "server_cpu_s"), ("server RSS MiB (end)", "server_rss_mib")):
        j = java.get(key) if isinstance(java, dict) else None
        o = ours.get(key) if isinstance(ours, dict) else None
        lines.append(f"{label:<28}{_fmt(j):>14}{_fmt(o):>14}")
    for side in ("java", "ours"):
        if isinstance(results.get(side), str):
            lines.append(f"{side}: FAILED: {results[side]}")
    return "\n".join(lines)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and v >= 100:
        return f"{v:,.0f}"
    return f"{v:,}" if isinstance(v, int) else f"{v:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--send", type=int, default=50_000, help="sync sends (default 50,000)")
    ap.add_argument("--batch", type=int, default=200_000, help="messages sent in batches of 32 (default 200,000)")
    ap.add_argument("--latency", type=int, default=2_000, help="latency samples (default 2,000)")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--full", action="store_true", help="the issue's setting: 200,000 sends + 800,000 batched "
                    "(a 1 M-message drain), 10,000 latency samples")
    ap.add_argument("--only", choices=("java", "ours"), help="run one side only")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per load-generator run")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    ap.add_argument("--py-spy", type=Path, metavar="DIR", help="sample our broker with py-spy over each phase into "
                    "DIR/ours-<phase>.txt (collapsed stacks; needs py-spy and ptrace rights)")
    ap.add_argument("--dir", type=Path, help="parent of the temporary directory (stores are ~1-2 GiB with --full)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (stores, logs)")
    args = ap.parse_args()
    if args.full:
        args.send, args.batch, args.latency = 200_000, 800_000, 10_000
    try:
        peers.find_dist()
        peers.find_java()
    except peers.JavaUnavailable as exc:
        print(f"cannot run: {exc}", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="bench-broker-", dir=args.dir))
    results: dict[str, dict | str] = {}
    try:
        classes = compile_loadgen(home / "classes")
        for side in ("java", "ours"):
            if args.only and side != args.only:
                continue
            try:
                results[side] = run_side(side, classes, home, args)
            except (BenchError, peers.PeerError, subprocess.TimeoutExpired) as exc:
                lines = [line for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
                results[side] = lines[0] + (f" ... {lines[-1].strip()}" if len(lines) > 1 else "")
                print(f"[{side}] FAILED: {exc}", file=sys.stderr)
        meta = {"send": args.send, "batch": args.batch, "latency": args.latency, "threads": args.threads,
                "size": args.size, "cpus": os.cpu_count(), "load_avg": os.getloadavg()}
        print(f"\nbroker benchmark: {json.dumps(meta)}")
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
