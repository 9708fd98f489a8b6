"""Child process of the concurrent-read campaign: follows every queue through a read-only store
while the writer appends, and checks each message as it arrives.

usage: concurrent_reader.py ROOT QUEUES MODE TIMEOUT_S      (MODE: range | get)

``range`` reads with ``read_range`` (Arrow batches, BODYCRC verified), ``get`` with ``get_message``.
Every row must be the message expected next in its queue: right queue offset, right body (so never
torn or partial), CRC intact; each is counted once. Prints one JSON line: rows seen per queue, rows
that failed, polls made.
"""

from __future__ import annotations

import json
import sys
import time
import zlib
from pathlib import Path

from reliutil import TOPIC, body
from rocketstream.store import GetMessageStatus, MessageStore


def main() -> None:
    root, queues, mode, timeout = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    done = Path(f"{root}.done")
    seen = [0] * queues
    bad: list[str] = []
    polls = 0
    deadline = time.time() + timeout
    with MessageStore.open(root, read_only=True) as store:
        print("ready", flush=True)
        totals = None
        while time.time() < deadline and len(bad) < 10:
            if totals is None and done.exists():
                totals = json.loads(done.read_text())
            if totals is not None and seen == totals:
                break
            polls += 1
            progressed = False
            for q in range(queues):
                n = _follow_range(store, q, seen, bad) if mode == "range" else _follow_get(store, q, seen, bad)
                progressed |= n > 0
            if not progressed:
                time.sleep(0.002)
    print(json.dumps({"mode": mode, "seen": seen, "bad": bad, "polls": polls, "totals": totals}), flush=True)


def _follow_range(store: MessageStore, q: int, seen: list[int], bad: list[str]) -> int:
    hi = store.max_offset(TOPIC, q)
    got = 0
    for batch in store.read_range(TOPIC, q, seen[q], hi, columns=["queueOffset", "queueId", "body"],
                                  check_crc=True):
        for qoff, qid, data in zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True):
            if qoff != seen[q] or qid != q or data != body(q, seen[q]):
                bad.append(f"range q{q}@{seen[q]}: got queueOffset {qoff} queueId {qid} body {data[:24]!r}")
                return got
            seen[q] += 1
            got += 1
    return got


def _follow_get(store: MessageStore, q: int, seen: list[int], bad: list[str]) -> int:
    r = store.get_message("rel", TOPIC, q, seen[q], 32)
    if r.status is not GetMessageStatus.FOUND:
        if r.status not in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                            GetMessageStatus.NO_MATCHED_LOGIC_QUEUE):
            bad.append(f"get q{q}@{seen[q]}: status {r.status}")
        return 0
    for m in r.messages:
        crc_ok = zlib.crc32(m.body) & 0x7FFFFFFF == m.body_crc
        if m.queue_offset != seen[q] or m.queue_id != q or not crc_ok or m.uncompressed_body() != body(q, seen[q]):
            bad.append(f"get q{q}@{seen[q]}: got queue offset {m.queue_offset}, crc ok {crc_ok}")
            return 0
        seen[q] += 1
    return len(r.messages)


if __name__ == "__main__":
    main()
