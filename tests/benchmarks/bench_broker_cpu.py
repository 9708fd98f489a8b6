"""CPU time per message through the broker's request handlers in-process: frame decode -> processor ->
response encode, no sockets and no client. On a shared machine this is steadier than the
throughput bench_broker.py measures, because it counts this process's CPU time, not wall time.

    python tests/benchmarks/bench_broker_cpu.py [--count 3000] [--repeat 3]

Cases (1 KiB bodies, 8 queues, a fresh store): ``send`` = SEND_MESSAGE_V2 one message each (headers
as the 4.9.8 client writes them); ``batch`` = SEND_BATCH_MESSAGE of 32; ``batchj`` = the same as the 4.9.8
Java client encodes it (no last \\x02 in each message's properties); ``pull`` = PULL_MESSAGE of 32 (no
suspend) over what was sent; ``pull1024`` = PULL_MESSAGE of 1024 from a broker whose transfer limits
are raised (maxTransferCountOnMessageInMemory 4096, maxTransferBytesOnMessageInMemory 8 MiB), as Spark's
network read asks, over one queue written in batches of 256. Prints the best of ``--repeat`` µs per
message for each.
"""

from __future__ import annotations

import argparse
import asyncio
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=3000, help="messages per case and run")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    res = asyncio.run(_run(args.count, args.repeat))
    print(f"{'case':<8}{'best µs/msg':>14}   all runs")
    for name, values in res.items():
        print(f"{name:<8}{min(values):>14.1f}   {' '.join(f'{v:.1f}' for v in values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
