"""Delayed delivery: ``SCHEDULE_TOPIC_XXXX`` -> the real topic (RocketMQ 4.9.8 ``ScheduleMessageService``).

A message stored with ``DELAY=<level>`` lands in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` with its
original topic and queue in ``REAL_TOPIC`` / ``REAL_QID`` (messages.prepare, docs/store-format.md); dispatch
writes the **delivery timestamp** (STORETIMESTAMP + the level's delay) as the unit's tagsCode. This service
keeps one position per level over those queues and, every ``DELAY_FOR_A_WHILE`` (100 ms), walks each level
from its position while units are due (``DeliverDelayedMessageTimerTask.executeOnTimeup``):

* a due unit's record is read and rebuilt for its real topic and queue (:func:`message_timeup`), then put
  through the ``put`` callable (the broker wraps the store's put to wake long-polling pulls); the copy gets
  a new queue offset, commit-log offset and store timestamp there;
* a deliver timestamp further ahead than now + the level's delay (a clock that went back) counts as due
  now (``correctDeliverTimestamp``);
* a unit whose record cannot be read (commit log removed by retention, a unit that disagrees with the
  record it points to) or that names no valid real topic/queue is skipped with a log line, as Java skips a
  record ``lookMessageByOffset`` cannot find; a real topic ``RMQ_SYS_TRANS_HALF_TOPIC`` is discarded
  ("[BUG] the real topic of schedule msg is ...");
* a put the store refuses for good (MESSAGE_ILLEGAL, PROPERTIES_SIZE_EXCEEDED) is skipped with an error
  line; any other failed put stops the level at that unit, and it is tried again on the next check (Java
  retries the same offset after 100 ms). An exception stops the level for ``DELAY_FOR_A_PERIOD`` (10 s).

Positions are the ``offsetTable`` of ``config/delayOffset.json``, written the way 4.9.8's fastjson writes
``DelayOffsetSerializeWrapper`` (``{"offsetTable":{1:40,2:12}}`` pretty printed: bare integer keys) with
RocketMQ's file discipline (``.tmp`` then rename, previous content kept as ``.bak``; ``ConfigManager``).
They are persisted every ``flushDelayOffsetInterval`` (10 s), by :meth:`ScheduleMessageService.persist`
and by :meth:`ScheduleMessageService.stop`. A position is advanced only after its unit was put (or
skipped), so after a crash the units since the last persist are delivered again: at-least-once, never a
loss. As in ``ScheduleMessageService.correctDelayOffset``, a loaded position outside the queue's
[min, max] is moved to the nearest end (retention removed the units below it, or the queue was cut).

Deviation, on purpose: Java's offset table only moves on a successful put; here a skipped unit moves it
too, so a restart does not log the same unreadable units again.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rocketstream import codec
from rocketstream.codec.fastjson import FastjsonParser, decode_text, dump_fastjson
from rocketstream.errors import OffsetFileError, StoreError
from rocketstream.fsutil import fsync_dir, write_atomic, write_synced_tmp
from rocketstream.store.message_store import MessageStore
from rocketstream.store.write.messages import Message, PutMessageResult, PutMessageStatus

__all__ = ["ScheduleMessageService", "message_timeup", "load_delay_offsets", "dump_delay_offsets",
           "DELAY_OFFSET_FILE", "RMQ_SYS_TRANS_HALF_TOPIC"]

log = logging.getLogger(__name__)

DELAY_OFFSET_FILE = "delayOffset.json"     # StorePathConfigHelper.getDelayOffsetStorePath
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
FIRST_DELAY_TIME_S = 1.0                   # ScheduleMessageService.FIRST_DELAY_TIME
DELAY_FOR_A_WHILE_S = 0.1                  # DELAY_FOR_A_WHILE: between checks of a level
DELAY_FOR_A_PERIOD_S = 10.0                # DELAY_FOR_A_PERIOD: after an exception
FLUSH_DELAY_OFFSET_INTERVAL_S = 10.0       # MessageStoreConfig.flushDelayOffsetInterval
UNITS_PER_SLICE = 64                       # units handled before the event loop gets a turn

# puts the store refuses whatever the moment: retrying them would stop the level for ever
_PERMANENT = frozenset({PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED})
_HOST_BITS = codec.FLAG_BORNHOST_V6 | codec.FLAG_STOREHOST_V6   # derived from the hosts again by the put
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

Put = Callable[[Message, int], PutMessageResult]


class _Outcome(enum.Enum):
    DELIVERED = "delivered"
    SKIPPED = "skipped"
    RETRY = "retry"


class UndeliverableError(ValueError):
    """A schedule record that cannot be rebuilt for its real topic (REAL_TOPIC / REAL_QID missing or bad)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# ------------------------------------------------------------------------------------- the record copy


def message_timeup(rec: codec.MessageRecord) -> tuple[Message, int]:
    """The due record as a message for its real topic and the real queue id (``messageTimeup``).

    Body, flag, sysFlag, born timestamp/host and reconsumeTimes are kept; the properties are stored
    exactly as they are (4.9.8 encodes the properties string before it clears DELAY, so the delivered
    record keeps DELAY, REAL_TOPIC, REAL_QID and WAIT - see the real-broker test) and DELAY does not
    delay the copy again (``Message.broker_copy``).
    """
    props = dict(rec.properties)
    topic = props.get(codec.PROPERTY_REAL_TOPIC)
    if not topic:
        raise UndeliverableError(f"record at commit-log offset {rec.physical_offset} has no "
                                 f"{codec.PROPERTY_REAL_TOPIC} property")
    raw_qid = props.get(codec.PROPERTY_REAL_QID)
    try:
        queue_id = int(raw_qid) if raw_qid is not None else -1
    except ValueError:
        queue_id = -1
    if not 0 <= queue_id <= _INT32[1]:
        raise UndeliverableError(f"record at commit-log offset {rec.physical_offset}: "
                                 f"{codec.PROPERTY_REAL_QID}={raw_qid!r} is not a queue id")
    msg = Message(topic=topic, body=rec.body, properties=props, flag=rec.flag,
                  sys_flag=rec.sys_flag & ~_HOST_BITS, born_timestamp=rec.born_timestamp,
                  born_host=rec.born_host, reconsume_times=rec.reconsume_times, broker_copy=True)
    return msg, queue_id


# ----------------------------------------------------------------------------- delayOffset.json


def load_delay_offsets(text: str | bytes, *, path: object = None) -> dict[int, int]:
    """``level -> offset`` from a delayOffset.json (4.x; a 5.x ``dataVersion`` is ignored).

    Keys may be bare (fastjson) or quoted (a standard JSON writer); anything else is an OffsetFileError
    naming the file and the character position.
    """
    p = FastjsonParser(decode_text(text, path), path)
    doc = p.document()
    if not isinstance(doc, dict):
        p.fail("the document is not an object", 0)
    raw = doc.get("offsetTable", {})
    if not isinstance(raw, dict):
        p.fail("'offsetTable' is not an object", p.positions[(id(doc), "offsetTable")][1])
    table: dict[int, int] = {}
    for key, value in raw.items():
        key_pos, value_pos = p.positions[(id(raw), key)]
        level = key
        if isinstance(key, str) and key.strip().lstrip("-").isdigit():
            level = int(key)
        if isinstance(level, bool) or not isinstance(level, int) or not _INT32[0] <= level <= _INT32[1]:
            p.fail(f"delay level {key!r} is not an int32", key_pos)
        if isinstance(value, bool) or not isinstance(value, int) or not _INT64[0] <= value <= _INT64[1]:
            p.fail(f"offset {value!r} of delay level {level} is not an int64", value_pos)
        table[level] = value
    return table


def dump_delay_offsets(table: Mapping[int, int]) -> str:
    """The file 4.9.8 writes: ``{\\n\\t"offsetTable":{1:40,2:12\\n\\t}\\n}`` (levels ascending, as a
    ConcurrentHashMap of small Integer keys iterates)."""
    return dump_fastjson({"offsetTable": {k: table[k] for k in sorted(table)}})


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


# ----------------------------------------------------------------------------------------- service


class ScheduleMessageService:
    """One delivery position per delay level over ``SCHEDULE_TOPIC_XXXX``; see the module doc.

    ``store``: the broker's MessageStore, open for writing. ``delay_levels_ms``: the delay of level
    1, 2, ... (``messageDelayLevel``, StoreConfig.delay_levels_ms). ``config_dir``: the directory of
    ``delayOffset.json`` (the store's ``config/``). ``put(message, queue_id)``: how a due message is
    stored (default ``store.put_message``; the broker passes its put that also wakes held pulls).
    All calls run on the event loop's thread, like every store call of the broker.
    """

    def __init__(self, store: MessageStore, delay_levels_ms: Sequence[int], config_dir: Path | str, *,
                 put: Put | None = None, first_delay_s: float = FIRST_DELAY_TIME_S,
                 check_interval_s: float = DELAY_FOR_A_WHILE_S,
                 persist_interval_s: float = FLUSH_DELAY_OFFSET_INTERVAL_S,
                 error_pause_s: float = DELAY_FOR_A_PERIOD_S) -> None:
        self.store = store
        self.delay_table: dict[int, int] = {i + 1: int(ms) for i, ms in enumerate(delay_levels_ms)}
        self.config_dir = Path(config_dir)
        self.path = self.config_dir / DELAY_OFFSET_FILE
        self._put: Put = put if put is not None else store.put_message
        self.first_delay_s = first_delay_s
        self.check_interval_s = check_interval_s
        self.persist_interval_s = persist_interval_s
        self.error_pause_s = error_pause_s
        self._table: dict[int, int] = {}      # offsetTable: what is persisted
        self._cursor: dict[int, int] = {}     # where each level's next check starts
        self._paused_until: dict[int, float] = {}
        self._persisted: dict[int, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0                    # counters for tests and runtime info
        self.skipped = 0

    @property
    def max_delay_level(self) -> int:
        return len(self.delay_table)

    # --- offsets ------------------------------------------------------------------------------
    def load(self) -> None:
        """Read ``delayOffset.json`` (else its ``.bak``, ConfigManager.load), then move positions outside
        their queue's [min, max] to the nearest end (``correctDelayOffset``). A missing file is an empty
        table; a file and backup that are both unusable raise OffsetFileError (never a silent reset: that
        would deliver every delayed message again)."""
        table = self._load_file()
        self._table = dict(table)
        for level in self.delay_table:
            current = self._table.get(level)
            if current is None:
                continue
            q = level - 1
            lo = self.store.min_offset(codec.SCHEDULE_TOPIC, q)
            hi = self.store.max_offset(codec.SCHEDULE_TOPIC, q)
            corrected = min(max(current, lo), hi)
            if corrected != current:
                log.error("schedule CQ offset invalid: level %d offset %d outside [%d, %d] of %s/%d; "
                          "corrected to %d", level, current, lo, hi, codec.SCHEDULE_TOPIC, q, corrected)
                self._table[level] = corrected
        self._cursor = dict(self._table)
        self._persisted = dict(table)

    def _load_file(self) -> dict[int, int]:
        raw = _read(self.path)
        main_error: OffsetFileError | None = None
        if raw is not None and raw.strip():
            try:
                return load_delay_offsets(raw, path=self.path)
            except OffsetFileError as exc:
                main_error = exc
        bak = self.path.with_name(self.path.name + ".bak")
        bak_raw = _read(bak)
        if bak_raw is not None and bak_raw.strip():
            try:
                table = load_delay_offsets(bak_raw, path=bak)
            except OffsetFileError as exc:
                if main_error is None:
                    raise
                raise OffsetFileError(f"delay offset file and its backup are both unusable: {main_error}; "
                                      f"backup: {exc}", path=self.path, position=main_error.position) from exc
            if main_error is not None:
                log.warning("%s is unusable (%s); loaded %s", self.path, main_error, bak)
            return table
        if main_error is not None:
            raise main_error
        return {}

    def offset_table(self) -> dict[int, int]:
        """``level -> next offset`` (GET_ALL_DELAY_OFFSET 45 sends this table); a copy."""
        return dict(self._table)

    def encode(self) -> str:
        """The table as Java's ``encode()`` (not pretty) gives it, ``{"offsetTable":{1:40,2:12}}`` (fastjson:
        bare integer keys) - what GET_ALL_DELAY_OFFSET (45, admin.py) answers with."""
        return '{"offsetTable":{' + ",".join(f"{k}:{self._table[k]}" for k in sorted(self._table)) + "}}"

    def persist(self) -> None:
        """Write ``delayOffset.json`` when the table changed since the last write: ``.tmp`` fsynced, the
        previous file copied to ``.bak``, rename (MixAll.string2File, crash safe)."""
        if self._persisted == self._table:
            return
        table = dict(self._table)
        text = dump_delay_offsets(table).encode("utf-8")
        self.config_dir.mkdir(parents=True, exist_ok=True)
        previous = _read(self.path)
        tmp = write_synced_tmp(self.path, text)
        if previous is not None and previous.strip():
            write_atomic(self.path.with_name(self.path.name + ".bak"), previous)
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self._persisted = table

    # --- delivery -----------------------------------------------------------------------------
    def deliver_due(self, level: int, *, now_ms: int | None = None, limit: int | None = None) -> tuple[int, bool]:
        """Handle the due units of ``level`` from its position, at most ``limit`` of them.

        Returns (units handled, more): ``more`` is True when the limit stopped the walk before a unit
        that is not yet due. ``now_ms`` fixes the clock (tests); default: the wall clock per unit.
        """
        if level not in self.delay_table:
            raise ValueError(f"delay level {level} is not configured (levels 1..{self.max_delay_level})")
        q = level - 1
        handled = 0
        while True:
            # the queue's bounds again for every slice: a put that rolls the commit log may run retention
            cursor, hi = self._position(level, q)
            if cursor >= hi:
                return handled, False
            if limit is not None and handled >= limit:
                return handled, True
            units = self._units(q, cursor, min(hi, cursor + UNITS_PER_SLICE))
            if not units:
                return handled, False
            for offset, unit in units:
                now = _now_ms() if now_ms is None else now_ms
                if unit is not None and self._deliver_time(level, now, unit[2]) > now:
                    return handled, False
                if self._handle(level, offset, unit) is _Outcome.RETRY:
                    return handled, False
                self._cursor[level] = self._table[level] = offset + 1
                handled += 1
                if limit is not None and handled >= limit:
                    return handled, offset + 1 < hi

    def _position(self, level: int, q: int) -> tuple[int, int]:
        """(the level's position moved into [min, max] of its queue, max)."""
        topic = codec.SCHEDULE_TOPIC
        cursor = self._cursor.get(level, self._table.get(level, 0))
        lo, hi = self.store.min_offset(topic, q), self.store.max_offset(topic, q)
        if cursor < lo:
            log.error("schedule CQ offset invalid. offset=%d, cqMinOffset=%d, queueId=%d", cursor, lo, q)
            cursor = self._cursor[level] = lo
        elif cursor > hi:
            log.error("schedule CQ offset invalid. offset=%d, cqMaxOffset=%d, queueId=%d", cursor, hi, q)
            cursor = self._cursor[level] = hi
        return cursor, hi

    def _deliver_time(self, level: int, now: int, tags_code: int) -> int:
        """correctDeliverTimestamp: a time beyond now + the level's delay is due now."""
        return now if tags_code > now + self.delay_table[level] else tags_code

    def _units(self, q: int, start: int, end: int) -> list[tuple[int, tuple[int, int, int] | None]]:
        """(queue offset, (commit-log offset, size, tagsCode) or None when the unit disagrees with the
        commit log) for [start, end)."""
        topic = codec.SCHEDULE_TOPIC
        try:
            units = self.store.read_cq_units(topic, q, start, end)
        except StoreError:   # one unit at a time, to find the ones that cannot be read
            out: list[tuple[int, tuple[int, int, int] | None]] = []
            for i in range(start, end):
                try:
                    one = self.store.read_cq_units(topic, q, i, i + 1)
                except StoreError as exc:
                    log.warning("ScheduleMessageService: %s/%d unit %d cannot be read, skipped: %s",
                                topic, q, i, exc)
                    out.append((i, None))
                    continue
                out += [(i, (int(u["offset"]), int(u["size"]), int(u["tags_code"]))) for u in one]
            return out
        return [(start + i, (int(u["offset"]), int(u["size"]), int(u["tags_code"]))) for i, u in enumerate(units)]

    def _handle(self, level: int, offset: int, unit: tuple[int, int, int] | None) -> _Outcome:
        if unit is None:
            self.skipped += 1
            return _Outcome.SKIPPED
        phy, size, _ = unit
        try:
            rec = self.store.look_message_by_offset(phy, size)
        except StoreError as exc:   # lookMessageByOffset returned null: Java goes on with the next unit
            log.warning("ScheduleMessageService: level %d unit %d (commitLogOffset %d, size %d) cannot be "
                        "read, skipped: %s", level, offset, phy, size, exc)
            self.skipped += 1
            return _Outcome.SKIPPED
        try:
            msg, queue_id = message_timeup(rec)
        except UndeliverableError as exc:
            log.error("ScheduleMessageService: level %d unit %d skipped: %s", level, offset, exc)
            self.skipped += 1
            return _Outcome.SKIPPED
        if msg.topic == RMQ_SYS_TRANS_HALF_TOPIC:
            log.error("[BUG] the real topic of schedule msg is %s, discard the msg. commitLogOffset=%d",
                      msg.topic, phy)
            self.skipped += 1
            return _Outcome.SKIPPED
        result = self._put(msg, queue_id)
        if result.ok:
            self.delivered += 1
            return _Outcome.DELIVERED
        if result.status in _PERMANENT:
            log.error("ScheduleMessageService: a message time up, but the store refuses it (%s: %s); skipped. "
                      "topic=%s msgId=%s level=%d unit=%d", result.status.name, result.reason, msg.topic,
                      rec.msg_id, level, offset)
            self.skipped += 1
            return _Outcome.SKIPPED
        log.warning("ScheduleMessageService: a message time up, but reput it failed (%s: %s); retried. "
                    "topic=%s msgId=%s level=%d unit=%d", result.status.name, result.reason, msg.topic,
                    rec.msg_id, level, offset)
        return _Outcome.RETRY

    def deliver_all_due(self, *, now_ms: int | None = None) -> int:
        """Every level once, without limit (tests, tools); returns the units handled."""
        return sum(self.deliver_due(level, now_ms=now_ms)[0] for level in self.delay_table)

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the delivery task on the running event loop (idempotent)."""
        if self._task is not None and not self._task.done():
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ScheduleMessageService")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.first_delay_s)
        last_persist = loop.time()
        while True:
            more = False
            for level in self.delay_table:
                if self._paused_until.get(level, 0.0) > loop.time():
                    continue
                try:
                    more |= self.deliver_due(level, limit=UNITS_PER_SLICE)[1]
                except Exception:   # executeOnTimeup's catch: log, try this level again after a while
                    log.exception("ScheduleMessageService: delivering delay level %d failed; retried in %.0f s",
                                  level, self.error_pause_s)
                    self._paused_until[level] = loop.time() + self.error_pause_s
            if loop.time() - last_persist >= self.persist_interval_s:
                last_persist = loop.time()
                try:
                    self.persist()
                except (OSError, StoreError):
                    log.exception("ScheduleMessageService: persisting %s failed", self.path)
            await asyncio.sleep(0 if more else self.check_interval_s)

    def stop(self) -> None:
        """Cancel the delivery task and persist the positions (ScheduleMessageService.shutdown, then the
        broker's persist). Call it on the event loop's thread: the task is then suspended between two
        units, so the positions written are exactly what was delivered."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        self.persist()

    def runtime_info(self) -> dict[str, Any]:
        """``scheduleMessageOffset_<level>`` -> "offset,maxOffset" (buildRunningStats)."""
        return {f"scheduleMessageOffset_{level}":
                f"{offset},{self.store.max_offset(codec.SCHEDULE_TOPIC, level - 1)}"
                for level, offset in sorted(self._table.items())}
