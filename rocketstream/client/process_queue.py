"""``ProcessQueue``: the consumer-side snapshot of one MessageQueue (seeds 003/004; ``ProcessQueue.java`` 4.9.8).

Pulled messages wait in ``msg_tree`` (queue offset -> message, kept in offset order, RocketMQ's ``msgTreeMap``)
until a consume thread has processed them. The pull side reads ``msg_count`` / ``msg_size`` / :meth:`max_span`
for flow control; the concurrent consume service removes finished messages with :meth:`remove_messages`, whose
result is the offset to commit: the smallest offset still in the tree (never past an unconsumed message), or
``queue_offset_max + 1`` when the tree became empty. The orderly service moves messages to a second tree
(``consuming_msg_orderly_tree``) with :meth:`take_messages` and either :meth:`commit` s or puts them back
(:meth:`make_message_to_consume_again`).

Every method is thread-safe: the pull side runs on the client's event loop, consumption in the consume threads
(RocketMQ's ``treeMapLock`` is a read-write lock; one plain lock here). ``consume_lock`` is RocketMQ's
``lockConsume``: orderly consumption holds it while the listener runs, and a rebalance that takes the queue away
waits for it before unlocking the queue on the broker.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from operator import attrgetter
from typing import Protocol

__all__ = [
    "ProcessQueue",
    "REBALANCE_LOCK_MAX_LIVE_TIME_S",
    "REBALANCE_LOCK_INTERVAL_S",
    "PULL_MAX_IDLE_TIME_S",
]

# ProcessQueue.REBALANCE_LOCK_MAX_LIVE_TIME (rocketmq.client.rebalance.lockMaxLiveTime): 30 s
REBALANCE_LOCK_MAX_LIVE_TIME_S = 30.0
# ProcessQueue.REBALANCE_LOCK_INTERVAL (rocketmq.client.rebalance.lockInterval): 20 s
REBALANCE_LOCK_INTERVAL_S = 20.0
# ProcessQueue.PULL_MAX_IDLE_TIME (rocketmq.client.pull.pullMaxIdleTime): 120 s
PULL_MAX_IDLE_TIME_S = 120.0

_MAX_OFFSET_PROPERTY = "MAX_OFFSET"
_CONSUME_START_TIME_PROPERTY = "CONSUME_START_TIME"
CLEAN_EXPIRED_MSG_MAX = 16           # cleanExpiredMsg looks at up to 16 of the oldest messages per run

log = logging.getLogger("rocketstream.client")


class _Msg(Protocol):
    """What the process queue needs of a message (MessageExt has all of it)."""

    queue_offset: int
    body: bytes
    properties: dict[str, str]


_queue_offset = attrgetter("queue_offset")
_body = attrgetter("body")


def _now() -> float:
    return time.monotonic()


class ProcessQueue:
    """One queue's pulled-but-not-consumed messages, the orderly lock state and the dropped flag."""

    def __init__(self, *, lock_max_live_time_s: float = REBALANCE_LOCK_MAX_LIVE_TIME_S,
                 pull_max_idle_time_s: float = PULL_MAX_IDLE_TIME_S) -> None:
        self._lock = threading.Lock()
        self._offsets: list[int] = []            # sorted keys of msg_tree
        self.msg_tree: dict[int, _Msg] = {}      # msgTreeMap
        self._consuming_offsets: list[int] = []  # sorted keys of consuming_msg_orderly_tree
        self.consuming_msg_orderly_tree: dict[int, _Msg] = {}
        self.msg_count = 0        # messages in both trees (RocketMQ: msgCount)
        self.msg_size = 0         # body bytes in both trees (msgSize)
        self.queue_offset_max = 0
        self.msg_acc_cnt = 0      # messages left on the broker after the last pulled one
        self.dropped = False
        self.locked = False
        self.consuming = False    # a consume request for this queue is submitted / running
        self.try_unlock_times = 0
        self.last_pull_timestamp = _now()
        self.last_consume_timestamp = _now()
        self.last_lock_timestamp = _now()
        self.lock_max_live_time_s = lock_max_live_time_s
        self.pull_max_idle_time_s = pull_max_idle_time_s
        self.consume_lock = threading.Lock()    # lockConsume
        self.max_count_seen = 0   # highest msg_count ever reached (flow-control measurements)

    def __repr__(self) -> str:
        return (f"ProcessQueue(count={self.msg_count}, size={self.msg_size}, span={self.max_span()}, "
                f"max={self.queue_offset_max}, dropped={self.dropped}, locked={self.locked})")

    # ------------------------------------------------------------------ lock / idle state
    def is_lock_expired(self) -> bool:
        """``isLockExpired``: no successful broker lock for more than 30 s."""
        return _now() - self.last_lock_timestamp > self.lock_max_live_time_s

    def is_pull_expired(self) -> bool:
        """``isPullExpired``: no pull for more than 120 s (the rebalance then drops and recreates the queue)."""
        return _now() - self.last_pull_timestamp > self.pull_max_idle_time_s

    def mark_locked(self, locked: bool) -> None:
        self.locked = locked
        if locked:
            self.last_lock_timestamp = _now()

    # ------------------------------------------------------------------ pull side
    def put_messages(self, msgs: Sequence[_Msg]) -> bool:
        """``putMessage``: add pulled messages (a repeated offset is ignored); True when the caller must
        dispatch a consume request (orderly: only when none is running, ``consuming`` becomes True)."""
        offs = list(map(_queue_offset, msgs))
        with self._lock:
            tree = self.msg_tree
            if offs and (not self._offsets or offs[0] > self._offsets[-1]) and offs == sorted(set(offs)):
                # the usual pull: increasing offsets after every waiting one (one C-level pass each)
                tree.update(zip(offs, msgs, strict=True))
                self._offsets += offs
                valid = len(offs)
                self.queue_offset_max = offs[-1]
                self.msg_size += sum(map(len, map(_body, msgs)))
            else:
                valid = 0
                for off, msg in zip(offs, msgs, strict=True):
                    if off in tree:
                        continue
                    tree[off] = msg
                    if not self._offsets or off > self._offsets[-1]:
                        self._offsets.append(off)
                    else:
                        bisect.insort(self._offsets, off)
                    valid += 1
                    self.queue_offset_max = off
                    self.msg_size += len(msg.body)
            self.msg_count += valid
            self.max_count_seen = max(self.max_count_seen, self.msg_count)
            dispatch = False
            if self.msg_tree and not self.consuming:
                dispatch = True
                self.consuming = True
            if msgs:
                last = msgs[-1]
                get = getattr(last, "get_property", None)   # MessageExt: without decoding its properties
                raw = get(_MAX_OFFSET_PROPERTY) if get is not None else last.properties.get(_MAX_OFFSET_PROPERTY)
                if raw is not None and raw.lstrip("-").isdigit():
                    acc = int(raw) - last.queue_offset
                    if acc > 0:
                        self.msg_acc_cnt = acc
            return dispatch

    def max_span(self) -> int:
        """``getMaxSpan``: last offset - first offset of the waiting messages (0 when none wait)."""
        with self._lock:
            return self._offsets[-1] - self._offsets[0] if self._offsets else 0

    def first_offset(self) -> int | None:
        with self._lock:
            return self._offsets[0] if self._offsets else None

    def fill_process_queue_info(self) -> dict[str, object]:
        """``fillProcessQueueInfo``: ``ProcessQueueInfo``'s fields (without ``commitOffset``); timestamps in
        ms since the epoch (client_remoting.py, GET_CONSUMER_RUNNING_INFO)."""
        def epoch_ms(t: float) -> int:
            return int((time.time() - (_now() - t)) * 1000)
        with self._lock:
            info: dict[str, object] = {"cachedMsgCount": 0, "cachedMsgMaxOffset": 0, "cachedMsgMinOffset": 0,
                                       "transactionMsgCount": 0, "transactionMsgMaxOffset": 0,
                                       "transactionMsgMinOffset": 0}
            if self._offsets:
                info.update(cachedMsgMinOffset=self._offsets[0], cachedMsgMaxOffset=self._offsets[-1],
                            cachedMsgCount=len(self._offsets))
            if self._consuming_offsets:
                info.update(transactionMsgMinOffset=self._consuming_offsets[0],
                            transactionMsgMaxOffset=self._consuming_offsets[-1],
                            transactionMsgCount=len(self._consuming_offsets))
            info.update(cachedMsgSizeInMiB=self.msg_size // (1024 * 1024), locked=self.locked,
                        tryUnlockTimes=self.try_unlock_times, lastLockTimestamp=epoch_ms(self.last_lock_timestamp),
                        droped=self.dropped, lastPullTimestamp=epoch_ms(self.last_pull_timestamp),
                        lastConsumeTimestamp=epoch_ms(self.last_consume_timestamp))
            return info

    def has_temp_message(self) -> bool:
        with self._lock:
            return bool(self.msg_tree)

    # ------------------------------------------------------------------ concurrent consumption
    def remove_messages(self, msgs: Iterable[_Msg]) -> int:
        """``removeMessage``: drop consumed messages; the offset to commit next: the smallest offset still
        waiting, else ``queue_offset_max + 1``; -1 when the tree was already empty (nothing to commit)."""
        with self._lock:
            self.last_consume_timestamp = _now()
            if not self.msg_tree:
                return -1
            result = self.queue_offset_max + 1
            offs = list(map(_queue_offset, msgs))
            prevs = list(map(self.msg_tree.pop, offs, repeat(None)))
            if not all(prevs):   # some were not (or no longer) waiting (a message object is never falsy)
                found = [(off, prev) for off, prev in zip(offs, prevs, strict=True) if prev is not None]
                offs = [off for off, _ in found]
                prevs = [prev for _, prev in found]
            if offs:
                self.msg_count -= len(offs)
                self.msg_size -= sum(map(len, map(_body, prevs)))
                gone = sorted(offs)
                offsets = self._offsets
                i = bisect.bisect_left(offsets, gone[0])
                if offsets[i:i + len(gone)] == gone:   # one pulled batch: a run of the sorted offsets
                    del offsets[i:i + len(gone)]
                else:
                    for off in gone:
                        del offsets[bisect.bisect_left(offsets, off)]
            if self._offsets:
                result = self._offsets[0]
            return result

    def clean_expired_msg(self, consume_timeout_s: float, send_back: Callable[[_Msg], bool]) -> int:
        """``cleanExpiredMsg`` (concurrent consumption): while the oldest waiting message's consumption
        started (``CONSUME_START_TIME``) more than ``consume_timeout_s`` ago, send it back to the broker
        (``send_back``: delay level 3) and drop it from the queue; at most 16 per run. The number dropped."""
        dropped = 0
        for _ in range(min(self.msg_count, CLEAN_EXPIRED_MSG_MAX)):
            with self._lock:
                if not self._offsets:
                    break
                msg = self.msg_tree[self._offsets[0]]
                start = msg.properties.get(_CONSUME_START_TIME_PROPERTY)
                if not start or not start.isdigit() or time.time() * 1000 - int(start) <= consume_timeout_s * 1000:
                    break
            if not send_back(msg):
                log.error("send expired msg %s failed: it stays in the process queue", msg.queue_offset)
                break
            log.info("send expire msg back. offset=%d, startTime=%s", msg.queue_offset, start)
            if self.first_offset() == msg.queue_offset:
                self.remove_messages([msg])
                dropped += 1
        return dropped

    # ------------------------------------------------------------------ orderly consumption
    def take_messages(self, batch_size: int) -> list[_Msg]:
        """``takeMessages``: move up to ``batch_size`` smallest-offset messages to the consuming tree;
        none left means the consume request ends (``consuming`` False)."""
        with self._lock:
            self.last_consume_timestamp = _now()
            out: list[_Msg] = []
            take = min(batch_size, len(self._offsets))
            for off in self._offsets[:take]:
                msg = self.msg_tree.pop(off)
                out.append(msg)
                self.consuming_msg_orderly_tree[off] = msg
                bisect.insort(self._consuming_offsets, off)
            del self._offsets[:take]
            if not out:
                self.consuming = False
            return out

    def commit(self) -> int:
        """``commit``: the consuming messages are done; the offset after the last of them (-1 if none)."""
        with self._lock:
            if not self._consuming_offsets:
                return -1
            offset = self._consuming_offsets[-1]
            self.msg_count -= len(self.consuming_msg_orderly_tree)
            self.msg_size -= sum(len(m.body) for m in self.consuming_msg_orderly_tree.values())
            self.consuming_msg_orderly_tree.clear()
            self._consuming_offsets.clear()
            return offset + 1

    def make_message_to_consume_again(self, msgs: Iterable[_Msg]) -> None:
        """``makeMessageToConsumeAgain``: put messages back from the consuming tree (they are taken again
        first, their offsets being the smallest)."""
        with self._lock:
            for msg in msgs:
                off = msg.queue_offset
                if self.consuming_msg_orderly_tree.pop(off, None) is not None:
                    del self._consuming_offsets[bisect.bisect_left(self._consuming_offsets, off)]
                if off not in self.msg_tree:
                    self.msg_tree[off] = msg
                    bisect.insort(self._offsets, off)

    def rollback(self) -> None:
        """``rollback``: every consuming message back into the waiting tree."""
        with self._lock:
            for off, msg in self.consuming_msg_orderly_tree.items():
                if off not in self.msg_tree:
                    self.msg_tree[off] = msg
                    bisect.insort(self._offsets, off)
            self.consuming_msg_orderly_tree.clear()
            self._consuming_offsets.clear()

    def clear(self) -> None:
        with self._lock:
            self.msg_tree.clear()
            self._offsets.clear()
            self.consuming_msg_orderly_tree.clear()
            self._consuming_offsets.clear()
            self.msg_count = 0
            self.msg_size = 0
            self.queue_offset_max = 0
