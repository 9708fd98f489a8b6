"""Generate stores written by the real Apache RocketMQ 4.9.8 broker, with the Java client's reading of
them (the oracle), for rocketstream's real-store tests.

    python -m tests.realbroker.make_store OUTDIR [--variant clean|abort|retention|aged|all ...]

writes, for each variant V, ``OUTDIR/V/store`` (a broker's storePathRootDir), ``OUTDIR/V/oracle.jsonl``
(``RealStorePeer read``: one ``{"kind":"queue"}`` line per queue with the broker's min/max offsets and
one ``{"kind":"msg"}`` line per message, as the Java client pulls it) and ``OUTDIR/V/info.json``.

Variants:
  clean      the workload (tests/java/RealStorePeer.java ``write``, ~5,000 messages over >= 4
             commit-log files of 1 MiB, CQ files of 100 units) and a clean broker shutdown (no abort);
  abort      the same broker run killed with SIGKILL right after the workload: ``abort`` is present,
             the checkpoint is whatever the flush services last wrote;
  retention  a second broker whose own CleanCommitLogService deleted the oldest commit-log file(s)
             (and CleanConsumeQueueService the CQ files below the new min), then stopped cleanly;
  aged       a copy of ``clean`` with every file's mtime 100 h in the past (older than the 72 h
             default fileReservedTime).

How the real broker is made to run retention in a test's time: the retention broker is started with
``deleteWhen`` = the current (and next) local hour and ``fileReservedTime=48``; after its workload the
oldest commit-log files get an mtime 100 h ago, and the first run of
``DefaultMessageStore.CleanCommitLogService`` (scheduled 60 s after the store starts, then every
``cleanResourceInterval``) deletes them in ``MappedFileQueue.deleteExpiredFileByTime`` exactly as it
would in production. The retention broker runs in parallel with the main one, so the whole
generation takes about the 60 s of that first run plus a broker shutdown.

The oracle of clean, abort and aged is one reading: the killed (abort) store is copied, then a broker
started on the original recovers it (CommitLog.recoverAbnormally), the Java client reads everything,
and that broker is stopped cleanly - which makes the original the clean variant.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.realbroker import peers, storefiles

VARIANTS = ("clean", "abort", "retention", "aged")
AGED_HOURS = 100.0


@dataclass(frozen=True)
class RealStore:
    variant: str
    root: Path       # the store root (storePathRootDir)
    oracle: Path     # oracle.jsonl
    info: dict

    def oracle_records(self) -> tuple[dict[tuple[str, int], dict], list[dict]]:
        """(queues keyed (topic, queueId), messages) from the oracle file."""
        return load_oracle(self.oracle)


def load_oracle(path: Path) -> tuple[dict[tuple[str, int], dict], list[dict]]:
    """(queues keyed (topic, queueId), messages). Topics the Java side could not read at all appear
    as a queue key (topic, -1) holding {"kind": "error", ...}."""
    queues: dict[tuple[str, int], dict] = {}
    msgs: list[dict] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec["kind"] == "queue":
                queues[(rec["topic"], rec["queueId"])] = rec
            elif rec["kind"] == "error":
                queues[(rec["topic"], -1)] = rec
            else:
                msgs.append(rec)
    return queues, msgs


def store_topics(store: Path) -> list[str]:
    """Topics that have a consume queue directory in ``store``."""
    cq = store / "consumequeue"
    return sorted(p.name for p in cq.iterdir() if p.is_dir()) if cq.is_dir() else []


def commitlog_files(store: Path) -> list[str]:
    d = store / "commitlog"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def set_mtimes(root: Path, hours_ago: float) -> None:
    """Set the mtime (and atime) of every file and directory under ``root`` to ``hours_ago`` ago."""
    t = time.time() - hours_ago * 3600
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            os.utime(os.path.join(dirpath, name), (t, t), follow_symlinks=False)
    os.utime(root, (t, t))


def copy_store(src: Path, dst: Path, *, aged_hours: float | None = None) -> Path:
    """Copy a store (mtimes kept); with ``aged_hours`` set every file's mtime that many hours back."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    # GNU cp keeps the index file sparse (shutil.copytree writes its 8 MiB of zeros)
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True)
    if aged_hours is not None:
        set_mtimes(dst, aged_hours)
    return dst


def _wait_for(cond, timeout: float, what: str, poll: float = 0.2) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise peers.PeerError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
    return time.monotonic() - t0


def _delay_offsets_persisted(store: Path) -> bool:
    """config/delayOffset.json ({level: offset}, ScheduleMessageService) has caught up with every
    SCHEDULE_TOPIC_XXXX queue (queue id = level - 1)."""
    f = store / "config" / "delayOffset.json"
    if not f.is_file():
        return False
    text = f.read_text()
    table = {int(k): int(v) for k, v in re.findall(r"(\d+)\s*:\s*(\d+)", text)}
    units = storefiles.cq_units(store)
    for rel, _data in units.items():
        topic, qid, _ = rel.split("/")
        if topic == "SCHEDULE_TOPIC_XXXX":
            total = sum(len(d) for r, d in units.items() if r.startswith(f"{topic}/{qid}/")) // storefiles.CQ_UNIT
            if table.get(int(qid) + 1, 0) < total:
                return False
    return True


def _write_info(d: Path, info: dict) -> None:
    (d / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


def _workload_summary(log_text: str) -> dict:
    for line in reversed(log_text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}


def generate(outdir: Path, variants=VARIANTS, *, count: int = 5000, retention_count: int = 4000,
             log=lambda s: print(s, file=sys.stderr, flush=True)) -> dict[str, RealStore]:
    """Generate the requested variants under ``outdir`` (see the module docstring)."""
    variants = tuple(dict.fromkeys(variants))
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise ValueError(f"unknown variant(s) {sorted(unknown)}; valid: {VARIANTS}")
    peers.find_dist()
    peers.find_java()
    outdir = Path(outdir).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    for v in variants:
        if (outdir / v).exists():
            raise FileExistsError(f"{outdir / v} exists; remove it first")
    work = outdir / "_work"
    work.mkdir(exist_ok=True)
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    main_needed = bool({"clean", "abort", "aged"} & set(variants))
    ret_needed = "retention" in variants
    servers: list[peers.Server] = []
    result: dict[str, RealStore] = {}

    def mark(name: str) -> None:
        timings[name] = round(time.monotonic() - t0, 2)
        log(f"make_store: {name} at {timings[name]:.1f} s")

    try:
        # start every server first (non-blocking), compile while they boot
        if main_needed:
            main_home, store_a = work / "main", work / "main" / "store"
            ns1 = peers.start_namesrv(main_home)
            servers.append(ns1)
        if ret_needed:
            ret_home, store_r = work / "retention", work / "retention" / "store"
            ns2 = peers.start_namesrv(ret_home)
            servers.append(ns2)
        classes = peers.compile_peer(work / "classes")
        mark("compiled")
        if main_needed:
            ns1.wait_ready()
            # persist delay offsets / consumer offsets often (defaults 10 s / 5 s), so that the store
            # killed below already records every delivered delayed message: otherwise the recovery
            # broker's ScheduleMessageService delivers them again and the oracle would describe
            # messages the abort store does not hold
            b1 = peers.start_broker(main_home, ns1.port, store_a,
                                    {"flushDelayOffsetInterval": "500", "flushConsumerOffsetInterval": "1000"})
            servers.append(b1)
        if ret_needed:
            ns2.wait_ready()
            hour = time.localtime().tm_hour
            # CleanCommitLogService.isTimeToDelete: the current local hour is one of deleteWhen's
            b2 = peers.start_broker(ret_home, ns2.port, store_r, {
                "deleteWhen": f"{hour:02d};{(hour + 1) % 24:02d}",
                "fileReservedTime": "48",
                "cleanResourceInterval": "2000",
            })
            b2_started = time.monotonic()
            servers.append(b2)
        if main_needed:
            b1.wait_ready()
            w1_log = main_home / "write.log"
            w1 = peers.start_peer(classes, w1_log, "write", "--namesrv", f"127.0.0.1:{ns1.port}", "--prefix", "Rs",
                                  "--count", str(count), home=main_home)
        if ret_needed:
            b2.wait_ready()
            w2_log = ret_home / "write.log"
            w2 = peers.start_peer(classes, w2_log, "write", "--namesrv", f"127.0.0.1:{ns2.port}", "--prefix", "Rt",
                                  "--count", str(retention_count), home=ret_home)
        mark("brokers ready, workloads started")

        if main_needed:
            summary = _workload_summary(peers.wait_peer(w1, w1_log, 240, "RealStorePeer write (main)"))
            mark("main workload done")
            # the broker persists consumer offsets every flushConsumerOffsetInterval (5 s)
            _wait_for(lambda: (store_a / "config" / "consumerOffset.json").is_file(), 20, "config/consumerOffset.json")
            _wait_for(lambda: _delay_offsets_persisted(store_a), 20, "config/delayOffset.json to reach the "
                      "SCHEDULE_TOPIC_XXXX max offsets")
            b1.kill()
            ns1.kill()
            if not (store_a / "abort").is_file():
                raise peers.PeerError(f"no abort file in {store_a} after SIGKILL")
            files = commitlog_files(store_a)
            if "abort" in variants:
                copy_store(store_a, outdir / "abort" / "store")
            killed_end = storefiles.commitlog_end(store_a)
            # recovery by the Java broker, the oracle, a clean stop
            with peers.Cluster(work / "main-recover", store_a, clean_stop=True) as c:
                mark("recovery broker ready")
                oracle = peers.read_oracle(classes, c.namesrv_addr, store_topics(store_a), work / "main-oracle.jsonl",
                                           home=work / "main-recover")
                mark("main oracle read")
            if (store_a / "abort").exists():
                raise peers.PeerError(f"abort still present in {store_a} after a clean stop")
            mark("recovery broker stopped")
            if storefiles.commitlog_end(store_a) != killed_end:
                raise peers.PeerError(f"the recovery broker appended to the commit log ({killed_end} -> "
                                      f"{storefiles.commitlog_end(store_a)}): the oracle would not describe the "
                                      "abort store")
            base = {"count": count, "workload": summary, "commitlog_files": files,
                    "commitlog_file_size": peers.COMMITLOG_FILE_SIZE, "cq_file_size": peers.CQ_FILE_SIZE}
            if "abort" in variants:
                d = outdir / "abort"
                shutil.copy(oracle, d / "oracle.jsonl")
                _write_info(d, {**base, "variant": "abort"})
                result["abort"] = RealStore("abort", d / "store", d / "oracle.jsonl", {**base, "variant": "abort"})
            if "aged" in variants:
                d = outdir / "aged"
                copy_store(store_a, d / "store", aged_hours=AGED_HOURS)
                shutil.copy(oracle, d / "oracle.jsonl")
                info = {**base, "variant": "aged", "aged_hours": AGED_HOURS}
                _write_info(d, info)
                result["aged"] = RealStore("aged", d / "store", d / "oracle.jsonl", info)
            if "clean" in variants:
                d = outdir / "clean"
                d.mkdir()
                shutil.move(str(store_a), str(d / "store"))
                shutil.copy(oracle, d / "oracle.jsonl")
                info = {**base, "variant": "clean"}
                _write_info(d, info)
                result["clean"] = RealStore("clean", d / "store", d / "oracle.jsonl", info)

        if ret_needed:
            summary = _workload_summary(peers.wait_peer(w2, w2_log, 240, "RealStorePeer write (retention)"))
            mark("retention workload done")
            before = commitlog_files(store_r)
            if len(before) < 4:
                raise peers.PeerError(f"retention store has only {len(before)} commit-log files: {before}")
            victims = before[:2] if len(before) >= 5 else before[:1]
            old = time.time() - AGED_HOURS * 3600
            for name in victims:
                os.utime(store_r / "commitlog" / name, (old, old))
            left = 60 + 45 - (time.monotonic() - b2_started)
            _wait_for(lambda: not any((store_r / "commitlog" / n).exists() for n in victims), max(left, 15),
                      f"the broker's CleanCommitLogService to delete {victims}")
            # CleanConsumeQueueService runs right after CleanCommitLogService in the same
            # cleanFilesPeriodically pass; give it one more pass (cleanResourceInterval = 2 s)
            time.sleep(4.5)
            mark("retention deleted " + ",".join(victims))
            oracle = peers.read_oracle(classes, f"127.0.0.1:{ns2.port}", store_topics(store_r),
                                       work / "retention-oracle.jsonl", home=ret_home)
            mark("retention oracle read")
            b2.stop()
            ns2.kill()
            if (store_r / "abort").exists():
                raise peers.PeerError(f"abort still present in {store_r} after a clean stop")
            mark("retention broker stopped")
            d = outdir / "retention"
            d.mkdir()
            shutil.move(str(store_r), str(d / "store"))
            shutil.copy(oracle, d / "oracle.jsonl")
            info = {"variant": "retention", "count": retention_count, "workload": summary,
                    "commitlog_files_before": before, "deleted_by_broker": victims,
                    "commitlog_files": commitlog_files(d / "store"),
                    "commitlog_file_size": peers.COMMITLOG_FILE_SIZE, "cq_file_size": peers.CQ_FILE_SIZE}
            _write_info(d, info)
            result["retention"] = RealStore("retention", d / "store", d / "oracle.jsonl", info)
    finally:
        for s in servers:
            s.kill()
    mark("done")
    for r in result.values():
        r.info["timings"] = timings
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.realbroker.make_store", description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--variant", action="append", choices=VARIANTS + ("all",),
                    help="variant to generate (repeatable; default: all)")
    ap.add_argument("--count", type=int, default=5000, help="messages of the main workload (default 5000)")
    ap.add_argument("--retention-count", type=int, default=4000, help="messages of the retention workload")
    ap.add_argument("--keep-work", action="store_true", help="keep OUTDIR/_work (logs, classes)")
    args = ap.parse_args(argv)
    variants = VARIANTS if not args.variant or "all" in args.variant else tuple(args.variant)
    try:
        stores = generate(args.outdir, variants, count=args.count, retention_count=args.retention_count)
    except peers.JavaUnavailable as e:
        print(f"make_store: cannot run: {e}", file=sys.stderr)
        return 2
    if not args.keep_work:
        shutil.rmtree(args.outdir / "_work", ignore_errors=True)
    for v, s in stores.items():
        print(f"{v}: {s.root}  oracle {s.oracle}  commitlog {s.info['commitlog_files']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
