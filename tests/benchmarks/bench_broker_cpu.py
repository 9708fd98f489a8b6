"""CPU time per message through the broker's request handlers in-process: frame decode -> processor ->
response encode, no sockets and no client. On a shared machine this is steadier than the
throughput bench_broker.py measures, because it counts this process's CPU time, not wall time.

    python tests/benchmarks/bench_broker_cpu.py [--count 3000] [--repeat 3]

Cases (1 KiB bodies, 8 queues, a fresh store): ``send`` = SEND_MESSAGE_V2 one message each (headers
as the 4.9.8 client writes them); ``batch`` = SEND_BATCH_MESSAGE of 32; ``batchj`` = the same as the 4.9.8
Java client encodes it (no last \\x02 in each message's properties); ``pull`` = PULL_MESSAGE of 32 (no
suspend) over what was sent; ``pull1024`` = PULL_MESSAGE of 1024 from a broker whose transfer limits
are raised (maxTransferCountOnMessageInMemory 4096, maxTransferBytesOnMessageInMemory 8 MiB), as Spark's
network read asks, over one queue written in batches of 256; ``pullnet`` = PULL_MESSAGE of 32 (RocketMQ's
default transfer limits) answered by ``rocketstream serve`` in its own process over loopback TCP, to a
minimal client (pre-encoded requests on a plain socket, one pull in flight per queue as a consumer has):
the broker process's CPU from /proc per message, with its user and system parts (``pullnet-usr`` and
``pullnet-sys``; the system part is mostly the loopback copy of the answers). Prints the best of
``--repeat`` µs per message for each.

    python tests/benchmarks/bench_broker_cpu.py --cases pullnet --net-messages 200000 [--net-batch 32]

(``--net-batch 1``: pulls of one message, the broker's cost per request rather than per message.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from rocketstream import codec  # noqa: E402
from rocketstream.remoting import RemotingCommand, RequestCode  # noqa: E402
from rocketstream.remoting.command import decode_frame, encode_frame  # noqa: E402
from tests.broker import brokerutil as bu  # noqa: E402

BODY = b"x" * 1024


class _Channel:
    """What the processors use of a Channel; responses are encoded and dropped."""

    addr = "127.0.0.1:54321"
    closed = False
    close_reason = None

    def send_nowait(self, cmd: RemotingCommand) -> None:
        encode_frame(cmd)

    async def send(self, cmd: RemotingCommand) -> None:
        encode_frame(cmd)


def _batch_frame(i: int, *, java: bool = False) -> bytes:
    """A SEND_BATCH_MESSAGE of 32; ``java``: as the 4.9.8 client encodes it (``MessageBatch.encode``: TAGS, WAIT,
    UNIQ_KEY per message, each properties string without its last \\x02, MessageDecoder.messageProperties2String)."""
    if java:
        body = b"".join(
            codec.record._BATCH_HEAD.pack(20 + len(BODY) + 2 + len(p), 0, 0, 0, len(BODY)) + BODY
            + len(p).to_bytes(2, "big") + p
            for p in (f"TAGS\x01TagL\x02WAIT\x01true\x02UNIQ_KEY\x01{codec.new_uniq_key()}".encode()
                      for _ in range(32)))
    else:
        body = codec.encode_batch_body([(0, BODY, {"UNIQ_KEY": codec.new_uniq_key(), "WAIT": "true"})
                                        for _ in range(32)])
    return encode_frame(RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, {
        "a": "pg", "b": "T", "c": "TBW102", "d": 4, "e": i % 8, "f": 0, "g": int(time.time() * 1000), "h": 0,
        "i": "WAIT\x01true", "k": False, "m": True}, body))


async def _run(count: int, repeat: int) -> dict[str, list[float]]:
    res: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-broker-cpu-") as tmp:
        async with bu.broker(Path(tmp)) as controller:
            channel = _Channel()
            handle = controller.server._dispatch
            # 8 queues: the send header's defaultTopicQueueNums (4) would auto-create only 4, and every
            # request to queues 4-7 would be refused - cheap answers that halved the per-message figures
            controller.store.create_topic("T", 8)

            def run(frames: list[bytes]) -> float:
                t0 = time.process_time()
                for frame in frames:
                    req = decode_frame(frame[4:])
                    resp = handle(channel, req)
                    assert resp.code == 0 or req.code == RequestCode.PULL_MESSAGE, resp.remark
                    resp.opaque = req.opaque
                    resp.flag |= 1
                    encode_frame(resp)
                return time.process_time() - t0

            for _ in range(repeat):
                frames = [encode_frame(bu.send_v2("T", BODY, queue_id=i % 8)) for i in range(count)]
                res.setdefault("send", []).append(1e6 * run(frames) / count)
                frames = [_batch_frame(i) for i in range(count // 32)]
                res.setdefault("batch", []).append(1e6 * run(frames) / (len(frames) * 32))
                frames = [_batch_frame(i, java=True) for i in range(count // 32)]
                res.setdefault("batchj", []).append(1e6 * run(frames) / (len(frames) * 32))
                per_queue = controller.store.get_message_raw("T", 0, 0, 1).max_offset
                offsets = dict.fromkeys(range(8), 0)
                frames = []
                for i in range(count // 32):
                    q = i % 8
                    if offsets[q] + 32 > per_queue:
                        offsets[q] = 0
                    frames.append(encode_frame(bu.pull("G", "T", q, offsets[q], sys_flag=bu.SUBSCRIPTION)))
                    offsets[q] += 32
                res.setdefault("pull", []).append(1e6 * run(frames) / (len(frames) * 32))
        async with bu.broker(Path(tmp) / "raised", max_transfer_count_on_message_in_memory=4096,
                             max_transfer_bytes_on_message_in_memory=8 << 20) as controller:
            channel = _Channel()
            handle = controller.server._dispatch
            controller.store.create_topic("T", 1)
            for _ in range(0, max(count, 1024) * 4, 256):
                controller.store.put_batch("T", 0, [BODY] * 256)
            per_queue = controller.store.get_message_raw("T", 0, 0, 1).max_offset
            frames = [encode_frame(bu.pull("G", "T", 0, o, sys_flag=bu.SUBSCRIPTION, max_msgs=1024))
                      for o in range(0, per_queue - 1023, 1024)]
            for _ in range(repeat):
                t0 = time.process_time()
                for frame in frames:
                    req = decode_frame(frame[4:])
                    resp = handle(channel, req)
                    # a pull answer's body is views of the commit log (body_parts), not bytes
                    body = resp.body_parts if resp.body_parts is not None else [resp.body or b""]
                    assert resp.code == 0 and sum(len(p) for p in body) > 1024 * 1024, resp.remark
                    resp.opaque = req.opaque
                    resp.flag |= 1
                    encode_frame(resp)
                res.setdefault("pull1024", []).append(1e6 * (time.process_time() - t0) / (len(frames) * 1024))
    return res


def _proc_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process ``pid`` (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _pull_frames(queues: int, per_queue: list[int], batch: int) -> list[list[bytes]]:
    """The pulls of ``batch`` from 0 to the end of each queue, encoded; opaque = queue * 2**24 + index."""
    frames: list[list[bytes]] = []
    for q in range(queues):
        queue_frames = []
        for i, offset in enumerate(range(0, per_queue[q], batch)):
            cmd = bu.pull("G", "T", q, offset, sys_flag=bu.SUBSCRIPTION, max_msgs=batch)
            cmd.opaque = (q << 24) + i
            queue_frames.append(encode_frame(cmd))
        frames.append(queue_frames)
    return frames


def _drain_pulls(sock: socket.socket, frames: list[list[bytes]]) -> None:
    """Send ``frames[q]`` (the pulls of queue q, in order) with one pull per queue in flight, as a consumer
    pulls. The answers are only cut by their length prefix and their headers decoded (code checked): the
    client's cost stays small and in this process, not in the broker's /proc figure."""
    for queue_frames in frames:
        sock.sendall(queue_frames[0])
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    have = start = 0
    pending = len(frames)
    while pending:
        if start and len(buf) - have < (1 << 20):
            view[:have - start] = view[start:have]
            have, start = have - start, 0
        n = sock.recv_into(view[have:])
        if not n:
            raise ConnectionError("the broker closed the connection")
        have += n
        while have - start >= 4:
            length = int.from_bytes(view[start:start + 4], "big")
            if have - start - 4 < length:
                break
            head_len = int.from_bytes(view[start + 5:start + 8], "big")
            resp = decode_frame(bytes(view[start + 4:start + 8 + head_len]))
            if resp.code != 0:
                raise RuntimeError(f"pull answered {resp}")
            start += 4 + length
            q, i = resp.opaque >> 24, (resp.opaque & 0xFFFFFF) + 1
            if i < len(frames[q]):
                sock.sendall(frames[q][i])
            else:
                pending -= 1
        if start == have:
            start = have = 0


def _run_net(count: int, repeat: int, batch: int = 32) -> dict[str, list[float]]:
    """The ``pullnet`` case (module text)."""
    from rocketstream.store import MessageStore, StoreConfig
    from tests.benchmarks.bench_spark import serve_ours

    queues = 4
    res: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-broker-net-") as tmp:
        root = Path(tmp) / "store"
        cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 30)
        with MessageStore.open(root, config=cfg) as store:
            store.create_topic("T", queues)
            for i in range(0, count, 256):
                store.put_batch("T", (i // 256) % queues, [BODY] * 256)
            per_queue = [store.max_offset("T", q) for q in range(queues)]
        served = serve_ours(root, Path(tmp) / "home", {})
        try:
            host = served.namesrv_addr.rsplit(":", 1)[0]
            pid = served.procs[0].pid
            frames = _pull_frames(queues, per_queue, batch)
            got = sum(per_queue)
            with socket.create_connection((host, _broker_port(served.logs[0]))) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for i in range(repeat + 1):
                    u0, s0 = _proc_cpu(pid)
                    _drain_pulls(sock, frames)
                    u1, s1 = _proc_cpu(pid)
                    if i:   # the first run warms the broker up (imports, page faults of the mapped files)
                        res.setdefault("pullnet", []).append(1e6 * (u1 - u0 + s1 - s0) / got)
                        res.setdefault("pullnet-usr", []).append(1e6 * (u1 - u0) / got)
                        res.setdefault("pullnet-sys", []).append(1e6 * (s1 - s0) / got)
        finally:
            served.stop()
    return res


def _broker_port(log: Path) -> int:
    """The broker's port from ``rocketstream serve``'s log line "The broker[name, host:port] boot success"."""
    for line in log.read_text(errors="replace").splitlines():
        if "The broker[" in line and "boot success" in line:
            return int(line.split("The broker[", 1)[1].split("]", 1)[0].rsplit(":", 1)[1])
    raise RuntimeError(f"no boot line in {log}")


CASES = ("send", "batch", "batchj", "pull", "pull1024", "pullnet")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=3000, help="messages per case and run")
    ap.add_argument("--net-messages", type=int, default=100_000, help="messages of the pullnet case's store")
    ap.add_argument("--net-batch", type=int, default=32,
                    help="messages per pull of the pullnet case (1: the per-request cost)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    res: dict[str, list[float]] = {}
    if cases - {"pullnet"}:
        res.update((k, v) for k, v in asyncio.run(_run(args.count, args.repeat)).items()
                   if k in cases)
    if "pullnet" in cases:
        res.update(_run_net(args.net_messages, args.repeat, args.net_batch))
    print(f"{'case':<8}{'best µs/msg':>14}   all runs")
    for name, values in res.items():
        print(f"{name:<8}{min(values):>14.1f}   {' '.join(f'{v:.1f}' for v in values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
