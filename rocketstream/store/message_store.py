"""``MessageStore``: the facade over commit log, consume queues, recovery and retention.

Flush model: ASYNC_FLUSH (default) leaves dirty pages to the OS and msyncs on ``flush()``,
``close()`` and whenever the commit log rolls to a new file (no background thread). SYNC_FLUSH
msyncs the commit log before ``put_*`` returns. Either way the bytes are in the shared mapping
before ``put_*`` returns, so other processes see them at once. Index files are msynced as
IndexService does: when one is full (at the roll) and at ``close()``, not by ``flush()``.

``background_flush = True`` (the broker) hands all of that to the owner's flush thread instead
(RocketMQ's FlushRealTimeService / GroupCommitService / FlushConsumeQueueService): puts neither msync on a
roll nor under SYNC_FLUSH, and the owner flushes in three steps - ``plan_flush`` under the store lock
(what is written now), ``sync_planned`` in its thread without the lock (fdatasync, the GIL released, puts
go on), ``finish_flush`` (flushed positions and checkpoint timestamps from the plan, briefly under the
lock, then the checkpoint synced). Under SYNC_FLUSH the owner acknowledges a put only once a plan covering
its end (``physical_offset + wrote_bytes``) is synced.

Retention (``fileReservedTime``) runs when a writer opens the store and whenever the commit log rolls
to a new file; ``delete_expired_files`` can also be called (or ``rocketstream delete-expired`` run).
That holds for our own stores (``config/rocketstream.json``: we created them; 72 h unless configured).
A *foreign* store (written by a real broker: store files but no ``config/rocketstream.json``) carries no
retention policy of its own (docs/store-format.md, "Store root"), so a writer deletes nothing there unless
retention settings are given explicitly (``StoreConfig.file_reserved_time_hours`` / ``delete_when``, from the
broker.conf of that store, or ``delete_expired_files(reserved_hours=...)``); we never mark a foreign store as
ours.

Layouts are checked before anything is opened (layout.py): DLedger, multi-path commit logs,
BatchConsumeQueue and RocksDB stores are refused; consumequeue_ext/ and LMQ stores open read-only
only. A writer never creates a store over a root that holds store data without commitlog/.

A writer keeps ``index/`` as RocketMQ's IndexService does (files/index_writer.py), unless the store's
broker.conf says ``messageIndexEnable=false``: every put indexes its records' UNIQ_KEY and KEYS, a
full file rolls over, recovery removes entries beyond the commit log's end and indexes what follows
the last indexed record. That holds for a real broker's store too: its index files are continued in
their own geometry, byte-compatible, so a Java broker started after a clean close reads them as its own.

Readers (``read_only=True``) take no lock and write nothing. They find the end of each consume
queue by scanning for the first unit with size 0 (a writer publishes a batch by writing its first
unit's size last), and check every unit they return against the record header it points to
(``read_range``: in bulk_read, on the headers it decodes anyway).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa

from rocketstream import codec
from rocketstream.codec import CQ_DTYPE, HostAddress, MessageRecord
from rocketstream.codec.arrow_records import BATCH_BYTES
from rocketstream.errors import (
    NotAStoreError,
    OptionError,
    ReadOnlyStoreError,
    StoreConfigError,
    StoreError,
)
from rocketstream.store.files import index_file
from rocketstream.store.files.checkpoint import StoreCheckpoint
from rocketstream.store.files.commit_log import CommitLog, EncodedBatch
from rocketstream.store.files.consume_queue import ConsumeQueue, peek_bounds, read_units_at
from rocketstream.store.files.index_writer import IndexWriter
from rocketstream.store.files.lock import StoreLock, warn_if_locked
from rocketstream.store.files.mapped_file import MappedFile
from rocketstream.store.maintenance import layout as layouts
from rocketstream.store.maintenance.check import CheckReport, check_store
from rocketstream.store.maintenance.delay_levels import levels_in_store
from rocketstream.store.maintenance.recovery import recover
from rocketstream.store.maintenance.retention import delete_expired_files
from rocketstream.store.meta.config import (
    SETTINGS_FILE,
    StoreConfig,
    broker_conf_for,
    default_broker_conf,
    resolve_sizes,
    save_settings,
)
from rocketstream.store.meta.topic_config import TopicConfigTable
from rocketstream.store.read import bulk_read
from rocketstream.store.read.queries import StoreQueries
from rocketstream.store.write.dispatch import Dispatcher
from rocketstream.store.write.messages import (
    GetMessageResult,
    IllegalMessage,
    Message,
    PutMessageResult,
    PutMessageStatus,
    RawMessageResult,
    prepare,
)
from rocketstream.store.write.put_batch import PreparedList, prepare_batch
from rocketstream.store.write.put_columns import Bodies, build_columns
from rocketstream.store.write.put_raw import build_raw_batch

if TYPE_CHECKING:   # imported when first used (MessageStore.offsets)
    from rocketstream.store.meta.offsets import ConsumerOffsetManager

_TOPIC = attrgetter("topic")


@dataclass
class FlushPlan:
    """What one flush makes durable (``MessageStore.plan_flush``): each dirty file with the write
    position it had when planned, and the commit log's end and last store time then."""

    files: list[tuple[MappedFile, int]]
    commit_log_end: int
    store_timestamp: int
    consume_queues: bool
    checkpoint: bool


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _messages_of(topic: str, bodies: Bodies, tags: str | Sequence[str | None] | None,
                 keys: str | Sequence[str | Sequence[str] | None] | None, flag: int | Sequence[int],
                 born_timestamp: int | Sequence[int | None] | None, born_host: HostAddress | None) -> list[Message]:
    """put_batch's columns as Message objects, for the general rules."""
    if isinstance(bodies, (pa.Array, pa.ChunkedArray)):
        bodies = bodies.to_pylist()
    n = len(bodies)

    def column(value: object) -> list[Any]:
        return [value] * n if value is None or isinstance(value, (str, int)) else list(cast(Iterable[Any], value))

    return [Message(topic, b, tags=t, keys=k, flag=f, born_timestamp=ts, born_host=born_host)
            for b, t, k, f, ts in zip(bodies, column(tags), column(keys), column(flag), column(born_timestamp),
                                       strict=True)]


class MessageStore:
    """Open with ``MessageStore.open(root, read_only=...)``; use as a context manager."""

    def __init__(self, root: Path, config: StoreConfig, *, read_only: bool, foreign: bool = False,
                 layout: layouts.Layout | None = None) -> None:
        self.root = root
        self.config = config
        self.read_only = read_only
        self.foreign = foreign   # store files we did not create (no config/rocketstream.json): see module doc
        self.index: IndexWriter | None = None   # writer with messageIndexEnable: index/ kept up to date
        self.broker_name = config.broker_name
        self.commit_log = CommitLog(root, config.mapped_file_size_commit_log, read_only=read_only,
                                    store_host=config.store_host)
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._topic_dirs: dict[str, Path] = {}   # consumequeue/<topic> (a path join less per queue loaded)
        # reader: (min, units to the end) of queues queue_bounds(load=False) peeked at (peeked_units)
        self._peeked: dict[tuple[str, int], tuple[int, np.ndarray]] = {}
        self._lock = self.commit_log.lock
        self._store_lock: StoreLock | None = None
        self.checkpoint: StoreCheckpoint | None = None
        self.topic_config = TopicConfigTable(root, read_only=read_only)
        self._round_robin: dict[str, int] = {}
        self._closed = False
        self._dispatcher: Dispatcher | None = None
        self._queries = StoreQueries(root, config, self.commit_log, self._queue)
        # called after every put with (topic, queue_id, new max offset) of the queue that received messages
        # (the delay rewrite applied): ReputMessageService's NotifyMessageArrivingListener, in-process
        self.put_listeners: list[Callable[[str, int, int], None]] = []
        # True: the owner flushes in its own thread (plan_flush / sync_planned / finish_flush); puts never msync
        self.background_flush = False

    # --- opening ------------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | Path | None = None, *, read_only: bool = False, config: StoreConfig | None = None,
             create: bool | None = None) -> MessageStore:
        """Open a store. Sizes come from the store itself (see config.resolve_sizes); a ``config``
        passed explicitly must agree with them. ``create``: None = create when the directory is
        missing or empty; False = never; True = always allowed."""
        explicit = config is not None
        if config is None:
            if root is not None:
                conf = broker_conf_for(root)
                if conf is None:
                    config = StoreConfig(broker_name=Path(root).resolve().name)
                else:   # the broker.conf of this very store: its name, retention and layout settings
                    config = StoreConfig(broker_name=conf.broker_name,
                                         file_reserved_time_hours=conf.file_reserved_time_hours,
                                         delete_when=conf.delete_when, layout_settings=conf.layout_settings,
                                         message_index_enable=conf.message_index_enable,
                                         max_hash_slot_num=conf.max_hash_slot_num,
                                         max_index_num=conf.max_index_num, conf_path=conf.conf_path)
            else:
                config = StoreConfig.from_broker_conf(default_broker_conf())
        root = Path(root if root is not None else config.store_path_root_dir)
        config = replace(config, store_path_root_dir=root)
        layout = layouts.scan(root) if root.is_dir() else None
        if layout is not None:
            layouts.check(layout, config, read_only=read_only)
        is_store = layout is not None and layout.commitlog
        if not is_store:
            if read_only or create is False:
                raise NotAStoreError("not a RocketMQ store (no commitlog/ directory)", path=root)
            if layout is not None:
                layouts.refuse_create(layout)   # store data without commitlog/: never, whatever create says
            if root.exists() and (not root.is_dir() or (create is None and any(root.iterdir()))):
                raise NotAStoreError("refusing to create a store in a non-empty directory without commitlog/ "
                                     "(pass create=True to force)", path=root)
        foreign = (layout is not None and layout.has_store_data and not (root / SETTINGS_FILE).exists())
        config = resolve_sizes(root, config, explicit=explicit, read_only=read_only)
        store = cls(root, config, read_only=read_only, foreign=foreign, layout=layout)
        if read_only:
            store._start_reader()
        else:
            store._start_writer()
        return store

    def _start_reader(self) -> None:
        warn_if_locked(self.root)
        self.commit_log.load()
        self.checkpoint = StoreCheckpoint(self.root / "checkpoint", read_only=True)
        self.topic_config.load()

    def _start_writer(self) -> None:
        for d in ("commitlog", "consumequeue", "config"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self._store_lock = StoreLock(self.root)
        self._store_lock.acquire()
        try:
            if not self.foreign and not (self.root / SETTINGS_FILE).exists():
                save_settings(self.root, self.config)   # a store we create: ours from now on
            abnormal = (self.root / "abort").exists()
            self.commit_log.load()
            for topic, queue_id in self._queue_dirs():
                self._load_queue(topic, queue_id)
            self.checkpoint = StoreCheckpoint(self.root / "checkpoint", read_only=False)
            if self.config.message_index_enable:
                self.index = IndexWriter(self.root, self.checkpoint, max_hash_slot_num=self.config.max_hash_slot_num,
                                         max_index_num=self.config.max_index_num)
                self.index.load(abnormal=abnormal)
            self._dispatcher = Dispatcher(self._queue_for_dispatch, self.checkpoint, self.effective_delay_levels(),
                                          self.index)
            recover(self.commit_log, list(self._queues.values()), self._dispatcher, self.checkpoint,
                    abnormal=abnormal, check_crc=self.config.check_crc_on_recover, index=self.index)
            cl_min = self.commit_log.queue.min_offset()
            for (topic, queue_id), cq in self._queues.items():
                self.commit_log.topic_queue_table[f"{topic}-{queue_id}"] = cq.max_offset()
                cq.correct_min_offset(cl_min)
            self.topic_config.load()
            if self._retention_enabled:
                self.delete_expired_files()   # a writer that was down for a while catches up on retention
            (self.root / "abort").touch()
        except BaseException:
            if self.index is not None:
                self.index.close()
            self._store_lock.release()
            raise

    def effective_delay_levels(self) -> Sequence[int] | dict[int, int]:
        """The delay table for SCHEDULE_TOPIC_XXXX tagsCodes: the configured ``messageDelayLevel``,
        corrected by what the store's schedule queues show (delay_levels.py)."""
        ids = [q for t, q in self._queue_dirs() if t == codec.SCHEDULE_TOPIC]
        queues = [cq for cq in (self._queues.get((codec.SCHEDULE_TOPIC, q)) or self._queue(codec.SCHEDULE_TOPIC, q)
                                for q in ids) if cq is not None]
        return levels_in_store(self.commit_log, queues, self.config.delay_levels_ms)

    @property
    def _retention_enabled(self) -> bool:
        """Automatic retention (on open and on a roll): our own stores always, foreign ones only when
        retention settings were given explicitly."""
        return not self.foreign or self.config.retention_configured

    def _queue_dirs(self) -> list[tuple[str, int]]:
        base = self.root / "consumequeue"
        out: list[tuple[str, int]] = []
        try:
            topics = sorted(os.listdir(base))
        except FileNotFoundError:
            return out
        for topic in topics:
            try:
                names = os.listdir(base / topic)
            except NotADirectoryError:
                continue
            # non-numeric dirs skipped, as DefaultMessageStore.loadConsumeQueue skips them
            out += [(topic, int(q)) for q in names if q.isdigit()]
        return sorted(out)

    def _load_queue(self, topic: str, queue_id: int, commit_log_min: int = 0) -> ConsumeQueue:
        """Load a queue; a reader's is then as fresh as ``refresh(commit_log_min)`` makes it."""
        cq = ConsumeQueue(self.root, topic, queue_id, self.config.mapped_file_size_consume_queue,
                          read_only=self.read_only, check_units=self.commit_log.check_units,
                          topic_dir=self._topic_dir(topic))
        cq.load(commit_log_min)
        self._queues[(topic, queue_id)] = cq
        return cq

    def _queue_for_dispatch(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        return cq if cq is not None else self._load_queue(topic, queue_id)

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue, or None when it has no directory. Readers refresh it on every call."""
        cq = self._queues.get((topic, queue_id))
        if not self.read_only:
            return cq
        if cq is None:
            if not (self.root / "consumequeue" / topic / str(queue_id)).is_dir():
                return None
            return self._load_queue(topic, queue_id, self.commit_log.min_offset())
        cq.refresh(self.commit_log.min_offset())
        return cq

    # --- reads (StoreQueries), check and retention --------------------------------------------
    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    tags: Collection[str] | None = None) -> GetMessageResult:
        return self._queries.get_message(group, topic, queue_id, offset, max_msg_nums, tags)

    get_message.__doc__ = StoreQueries.get_message.__doc__

    def get_message_raw(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                        tags_codes: Collection[int] | None = None,
                        record_filter: Callable[[memoryview], bool] | None = None) -> RawMessageResult:
        return self._queries.get_message_raw(topic, queue_id, offset, max_msg_nums, tags_codes, record_filter)

    get_message_raw.__doc__ = StoreQueries.get_message_raw.__doc__

    def raw_record(self, commit_log_offset: int) -> bytes | None:
        return self._queries.raw_record(commit_log_offset)

    raw_record.__doc__ = StoreQueries.raw_record.__doc__

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        return self._queries.earliest_store_time(topic, queue_id)

    earliest_store_time.__doc__ = StoreQueries.earliest_store_time.__doc__

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        return self._queries.store_time_at(topic, queue_id, offset)

    store_time_at.__doc__ = StoreQueries.store_time_at.__doc__

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self._queries.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms)

    get_offset_in_queue_by_time.__doc__ = StoreQueries.get_offset_in_queue_by_time.__doc__

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int, boundary: str = "lower") -> int:
        return self._queries.search_offset(topic, queue_id, timestamp_ms, boundary)

    search_offset.__doc__ = StoreQueries.search_offset.__doc__

    def message_by_msg_id(self, msg_id: str) -> MessageRecord:
        return self._queries.message_by_msg_id(msg_id)

    message_by_msg_id.__doc__ = StoreQueries.message_by_msg_id.__doc__

    def query_message(self, topic: str, key: str, *, max_num: int = index_file.MAX_MSGS_NUM_BATCH,
                      begin_ms: int = 0, end_ms: int = index_file.MAX_TIMESTAMP,
                      uniq_key: bool = False) -> list[MessageRecord]:
        self.drain_index()   # keys of deferred dispatch first (dispatch.py)
        return self._queries.query_message(topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms,
                                           uniq_key=uniq_key)

    query_message.__doc__ = StoreQueries.query_message.__doc__

    def check(self) -> CheckReport:
        """Verify every record's CRC and that consume queues and commit log agree (maintenance/check.py)."""
        return check_store(self.commit_log, self._queue_dirs(), self._queue, self.effective_delay_levels())

    def delete_expired_files(self, now_ms: int | None = None, reserved_hours: float | None = None) -> list[Path]:
        """Retention (maintenance/retention.py). A foreign store carries no retention policy of its own:
        without ``reserved_hours`` or a ``fileReservedTime`` in its broker.conf the call is refused."""
        self._check_writable()
        if reserved_hours is None and self.foreign and not self.config.retention_configured:
            raise StoreConfigError("this store was written by another broker and carries no retention policy: give "
                                   "the hours to keep (reserved_hours, CLI --reserved-hours) or fileReservedTime in "
                                   "the broker.conf of this store", path=self.root)
        hours = self.config.reserved_hours if reserved_hours is None else reserved_hours
        with self._lock:
            self._drain_index_locked()
            deleted = delete_expired_files(self.commit_log, list(self._queues.values()), hours, now_ms)
            if deleted and self.index is not None:   # IndexService.deleteExpiredFile(commit-log min offset)
                deleted += self.index.delete_expired(self.commit_log.queue.min_offset())
            return deleted

    # --- closing ------------------------------------------------------------------------------
    def close(self) -> None:
        """Writer: flush, write the checkpoint, close the index, remove ``abort``, unlock. Idempotent."""
        if self._closed:
            return
        try:
            if not self.read_only:
                self.flush()
                assert self.checkpoint is not None   # opened by _start_writer
                self.checkpoint.close()
                if self.index is not None:
                    self.index.close()
                try:
                    os.unlink(self.root / "abort")
                except FileNotFoundError:
                    pass
        finally:
            self._closed = True
            self.commit_log.release()
            for cq in self._queues.values():
                cq.close_fd()
                cq.queue.release()
            if self._store_lock is not None:
                self._store_lock.release()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError("store is open read-only", path=self.root)
        if self._closed:
            raise StoreError("store is closed", path=self.root)

    # --- writing ------------------------------------------------------------------------------
    def create_topic(self, topic: str, queue_nums: int = 4) -> None:
        self._check_writable()
        with self._lock:
            self.topic_config.ensure(topic, queue_nums)

    def put_message(self, msg: Message, queue_id: int | None = None, *, create_topic: bool = True) -> PutMessageResult:
        """Store one message. ``queue_id`` None: round robin over the topic's queues. ``create_topic`` False:
        no topic config is made for a topic that has none (a topic that lives in the store only, as 4.9.8's
        ``RMQ_SYS_TRANS_OP_HALF_TOPIC``)."""
        self._check_writable()
        with self._lock:
            if queue_id is None:
                nums = self.topic_config.queue_nums(msg.topic) or self.config.default_topic_queue_nums
                queue_id = self._round_robin.get(msg.topic, 0) % nums
                self._round_robin[msg.topic] = queue_id + 1
            try:
                pm = prepare(msg, queue_id, store_host=self.config.store_host,
                             compress_over=self.config.compress_msg_body_over,
                             max_message_size=self.config.max_message_size, delay_levels=self.config.delay_levels_ms)
            except IllegalMessage as exc:
                return PutMessageResult(exc.status, reason=exc.reason)
            return self._put(PreparedList([pm], self.config.store_host), msg.topic, queue_id,
                             create_topic=create_topic)

    def put_messages(self, msgs: Sequence[Message], queue_id: int) -> PutMessageResult:
        """Store a batch: one topic, one queue, records contiguous in one commit-log file."""
        self._check_writable()
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, reason="empty batch")
        topic = msgs[0].topic
        if list(map(_TOPIC, msgs)).count(topic) != len(msgs):
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, reason="a batch must have one topic")
        cfg = self.config
        batch: EncodedBatch | None = prepare_batch(msgs, queue_id, store_host=cfg.store_host,
                                                                 max_message_size=cfg.max_message_size)
        if batch is None:   # user properties, sysflags, delays, mixed born hosts ...: the general rules
            return self._put_prepared(msgs, queue_id)
        with self._lock:
            return self._put(batch, topic, queue_id)

    def _put_prepared(self, msgs: Sequence[Message], queue_id: int) -> PutMessageResult:
        """A batch under the general rules (``messages.prepare`` per message), which also say what is wrong."""
        cfg = self.config
        try:
            batch = PreparedList([prepare(m, queue_id, store_host=cfg.store_host, compress_over=None,
                                          max_message_size=cfg.max_message_size, delay_levels=cfg.delay_levels_ms,
                                          batch=True) for m in msgs], cfg.store_host)
        except IllegalMessage as exc:
            return PutMessageResult(exc.status, reason=exc.reason)
        with self._lock:
            return self._put(batch, msgs[0].topic, queue_id)

    def put_batch(self, topic: str, queue_id: int, bodies: Sequence[bytes] | pa.BinaryArray, *,
                  tags: str | Sequence[str | None] | None = None, keys: str | Sequence[str | None] | None = None,
                  flag: int | Sequence[int] = 0, born_timestamp: int | Sequence[int | None] | None = None,
                  born_host: HostAddress | None = None) -> PutMessageResult:
        """Store a batch given as columns: one message per body, all to ``topic`` / ``queue_id``.

        ``tags`` and ``keys``: None, one str for every message, or one (str or None) per message;
        ``flag`` and ``born_timestamp`` (ms, default now): one
        value or one per message. Writes exactly what ``put_messages`` writes for the same messages
        (same records, refusals and result), but encodes the batch with numpy instead of per
        message; the result's ``msg_ids`` / ``offset_msg_ids`` are built when first read.

            store.put_batch("TopicTest", 0, [b"a", b"b"], tags="TagA", keys=["k1", "k2"])
        """
        self._check_writable()
        if not len(bodies):
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, reason="empty batch")
        cfg = self.config
        try:
            batch = build_columns(topic, queue_id, bodies, tags=tags, keys=keys, flag=flag,
                                  born_timestamp=born_timestamp, born_host=born_host, store_host=cfg.store_host,
                                  max_message_size=cfg.max_message_size)
        except OptionError as exc:   # a column's length differs from the number of bodies
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, reason=str(exc))
        if batch is None:
            # separators in tags, out-of-range fields ...: the general rules say what is wrong. build_columns
            # refuses what prepare_batch would, so put_messages' columnar attempt is skipped, not repeated.
            return self._put_prepared(_messages_of(topic, bodies, tags, keys, flag, born_timestamp, born_host),
                                      queue_id)
        with self._lock:
            return self._put(batch, topic, queue_id)

    def put_raw_batch(self, topic: str, queue_id: int, body: bytes, *, batch_properties: Mapping[str, str],
                      sys_flag: int, born_timestamp: int, born_host: HostAddress,
                      reconsume_times: int = 0) -> PutMessageResult | None:
        """A broker's SEND_BATCH_MESSAGE body stored as a whole (put_raw.py): what ``put_messages`` stores
        for the messages the broker would make of it, or None (nothing stored) when the batch needs those
        messages - the general rules, which also say what is wrong."""
        self._check_writable()
        cfg = self.config
        batch = build_raw_batch(topic, queue_id, body, batch_properties=batch_properties, sys_flag=sys_flag,
                                born_timestamp=born_timestamp, born_host=born_host,
                                reconsume_times=reconsume_times, store_host=cfg.store_host,
                                max_message_size=cfg.max_message_size)
        if batch is None:
            return None
        with self._lock:
            return self._put(batch, topic, queue_id)

    def _put(self, batch: EncodedBatch, topic: str, queue_id: int, *, create_topic: bool = True) -> PutMessageResult:
        """Append and dispatch; ``topic``/``queue_id`` as the producer named them (before a delay rewrite)."""
        total = batch.total
        if total + codec.END_FILE_MIN_BLANK_LENGTH > self.commit_log.file_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    reason=f"{total} bytes do not fit in a commit-log file of "
                                           f"{self.commit_log.file_size} bytes")
        have = self.topic_config.queue_nums(topic)
        if create_topic and (have is None or have <= queue_id):   # auto-create / widen (autoCreateTopicEnable)
            self.topic_config.ensure(topic, max(queue_id + 1, have or self.config.default_topic_queue_nums))
        files_before = len(self.commit_log.queue.files)
        now = _now_ms()
        result = self.commit_log.append(batch, now)
        # both made by _start_writer; _check_writable refused readers before any put got here
        assert self._dispatcher is not None and self.checkpoint is not None
        self._dispatcher.dispatch_append(batch, result)
        if self.background_flush:
            pass   # the owner's flush thread (module docstring)
        elif self.config.sync_flush:
            self.commit_log.flush()
            self.checkpoint.physic_msg_timestamp = result.store_timestamp
        elif len(self.commit_log.queue.files) != files_before and files_before:
            self.flush()   # rolled to a new file: persist the full one and move the checkpoint on
        if len(self.commit_log.queue.files) > files_before and files_before and self._retention_enabled:
            # RocketMQ's clean service runs on a timer; with no background thread, a roll is our tick:
            # files older than fileReservedTime go (never the last one), queue minimums follow.
            self.delete_expired_files()
        if batch.dispatch and self.put_listeners:
            new_max = result.queue_offset + batch.count
            for listener in list(self.put_listeners):
                listener(batch.topic, batch.queue_id, new_max)
        host = self.config.store_host
        msg_ids: list[str] | Callable[[], list[str]]
        offset_ids: list[str] | Callable[[], list[str]]
        if batch.count == 1:
            msg_ids, offset_ids = batch.uniq_keys(), [codec.offset_msg_id(host, result.physical_offset)]
        else:   # built when first read
            msg_ids = batch.uniq_keys
            # an int64 array: offset_msg_ids reads it with np.asarray
            offsets = cast(Sequence[int], np.add(result.starts, result.physical_offset))
            offset_ids = partial(codec.offset_msg_ids, host, offsets)
        return PutMessageResult(PutMessageStatus.PUT_OK, msg_ids=msg_ids, offset_msg_ids=offset_ids,
                                queue_offset=result.queue_offset, physical_offset=result.physical_offset,
                                wrote_bytes=result.wrote_bytes, store_timestamp=result.store_timestamp,
                                count=batch.count)

    def flush(self) -> None:
        """msync commit log and consume queues, then advance and msync the checkpoint (index files: at
        their roll and at ``close()``, as IndexService flushes them)."""
        self._check_writable()
        with self._lock:
            self._drain_index_locked()
            self.commit_log.flush()
            for cq in self._queues.values():
                cq.flush()
            ts = self.commit_log.last_store_timestamp
            assert self.checkpoint is not None   # opened by _start_writer (_check_writable refused readers)
            if ts:
                self.checkpoint.physic_msg_timestamp = ts
                self.checkpoint.logics_msg_timestamp = ts
            self.checkpoint.flush()

    def defer_index(self, on_pending: Callable[[], None] | None) -> None:
        """Writer: build the index after the put rather than in it (``ReputMessageService`` builds it after
        the answer, in its own thread): ``on_pending()`` is called when a put leaves keys waiting and must
        see to it that :meth:`drain_index` runs soon (the broker: on the loop, after this iteration's
        answers are written). Queries, flushes, retention and ``close`` drain first. None: each put
        writes its keys again."""
        self._check_writable()
        assert self._dispatcher is not None   # made by _start_writer
        with self._lock:
            self._dispatcher.defer_index(on_pending)

    def drain_index(self) -> None:
        """Write the index keys waiting since the last drain (:meth:`defer_index`); nothing when none wait."""
        if self._dispatcher is None or self._closed:
            return
        with self._lock:
            self._drain_index_locked()

    def _drain_index_locked(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.drain_index()

    def plan_flush(self, *, consume_queues: bool = True, checkpoint: bool = True) -> FlushPlan:
        """Step 1 of a background flush (module docstring), on the writer's thread: the dirty files of
        the commit log (and of every consume queue with ``consume_queues``) and the positions to sync."""
        self._check_writable()
        with self._lock:
            files = [(mf, mf.wrote_position) for mf in self.commit_log.dirty_files()]
            if consume_queues:
                for cq in self._queues.values():
                    files += [(mf, mf.wrote_position) for mf in cq.dirty_files()]
            return FlushPlan(files, self.commit_log.max_offset(), self.commit_log.last_store_timestamp,
                             consume_queues, checkpoint)

    def sync_planned(self, plan: FlushPlan) -> None:
        """Step 2, in any thread and without the store lock: fdatasync the planned files (the GIL is
        released while the kernel writes; puts go on meanwhile)."""
        for mf, _ in plan.files:
            mf.datasync()

    def finish_flush(self, plan: FlushPlan) -> None:
        """Step 3, in the thread that synced: the planned positions are durable, and so is everything
        stored up to the plan's store time - the checkpoint says so (physicMsgTimestamp; logicsMsgTimestamp
        when the consume queues were synced too) and is synced when the plan says ``checkpoint``."""
        with self._lock:
            if self._closed:
                return
            for mf, end in plan.files:
                if end > mf.flushed_position:
                    mf.flushed_position = end
            assert self.checkpoint is not None   # a writer (plan_flush checked)
            ts = plan.store_timestamp
            if ts:
                if ts > self.checkpoint.physic_msg_timestamp:
                    self.checkpoint.physic_msg_timestamp = ts
                if plan.consume_queues and ts > self.checkpoint.logics_msg_timestamp:
                    self.checkpoint.logics_msg_timestamp = ts
            checkpoint = self.checkpoint
        if plan.checkpoint:   # outside the lock: puts need not wait for the disk
            checkpoint.datasync()

    # --- metadata -----------------------------------------------------------------------------
    def topics(self) -> list[str]:
        if self.read_only:
            self.topic_config.load()
        names = {t for t, _ in self._queue_dirs()} | set(self.topic_config.table)
        return sorted(names)

    def queue_ids(self, topic: str) -> list[int]:
        try:
            names = os.listdir(self.root / "consumequeue" / topic)
        except (FileNotFoundError, NotADirectoryError):
            names = []
        ids = {int(q) for q in names if q.isdigit()}
        ids |= set(range(self.topic_config.queue_nums(topic) or 0))
        return sorted(ids)

    def queue_bounds(self, topic: str, queue_ids: Iterable[int], *, load: bool = True) -> list[tuple[int, int]]:
        """``(min, max)`` offsets of each queue, as ``min_offset`` / ``max_offset`` give them, with the
        commit log and every queue refreshed once (a reader's planner asks for a thousand queues at a time).
        ``load=False`` (a reader asking once, like a batch query's planner): a queue not loaded yet is first
        peeked at (``consume_queue.peek_bounds``: one listing, one read of its file's head, nothing mapped or
        kept) and loaded only when the peek cannot tell."""
        if not self.read_only:
            return [(self.min_offset(topic, q), self.max_offset(topic, q)) for q in queue_ids]
        ids = list(queue_ids)
        if load:
            return [(0, 0) if cq is None else (cq.min_offset(), cq.max_offset())
                    for cq in self.queues_for_read(topic, ids)]
        cl_min = self.commit_log.min_offset()
        size = self.config.mapped_file_size_consume_queue
        topic_dir = str(self._topic_dir(topic))
        bounds: list[tuple[int, int] | None] = []
        for q in ids:
            peeked = None if (topic, q) in self._queues else peek_bounds(f"{topic_dir}/{q}", size, cl_min)
            if peeked is None:
                self._peeked.pop((topic, q), None)
                bounds.append(None)
            else:
                self._peeked[(topic, q)] = peeked
                bounds.append((peeked[0], peeked[0] + len(peeked[1])))
        rest = [q for q, b in zip(ids, bounds, strict=True) if b is None]
        if rest:
            loaded = iter(self.queue_bounds(topic, rest))
            bounds = [next(loaded) if b is None else b for b in bounds]
        return cast("list[tuple[int, int]]", bounds)

    def peeked_units(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray | None:
        """Units [start, end) of a queue as the last ``queue_bounds(load=False)`` peeked at them (units a writer
        published never change), when they lie within what it saw; None otherwise."""
        peeked = self._peeked.get((topic, queue_id))
        if peeked is None:
            return None
        low, units = peeked
        if not low <= start <= end <= low + len(units):
            return None
        return units[start - low:end - low]

    def units_at(self, topic: str, queue_id: int, start: int, end: int,
                 commit_log_min: int | None = None) -> np.ndarray | None:
        """Reader: units [start, end) of a queue read positionally (``consume_queue.read_units_at``: no listing,
        no mapping, nothing kept), when every one of them is a message a reader may return; None otherwise
        (part of the range under the queue's min or past its end, a file missing or damaged; a writer, whose
        loaded queues are the truth), and the caller goes through ``queues_for_read``, whose min, max and
        errors decide. ``commit_log_min``: the commit log's min when the caller has just read it."""
        if not self.read_only:
            return None
        if commit_log_min is None:
            commit_log_min = self.commit_log.min_offset()
        return read_units_at(f"{self._topic_dir(topic)}/{queue_id}", self.config.mapped_file_size_consume_queue,
                             start, end, commit_log_min)

    def queue_loaded(self, topic: str, queue_id: int) -> bool:
        """Whether the queue is loaded (kept mapped and refreshed by ``queues_for_read``)."""
        return (topic, queue_id) in self._queues

    def _topic_dir(self, topic: str) -> Path:
        topic_dir = self._topic_dirs.get(topic)
        if topic_dir is None:
            topic_dir = self._topic_dirs[topic] = self.root / "consumequeue" / topic
        return topic_dir

    def queues_for_read(self, topic: str, queue_ids: Iterable[int], *,
                        refresh: bool = True) -> list[ConsumeQueue | None]:
        """Each queue as ``_queue`` gives it (None: no directory), refreshed once with the commit log's min
        read once: a reader of many ranges (a Spark task) then reads them without refreshing again.
        ``refresh=False``: a queue already loaded is taken as it is (a planner that just refreshed it)."""
        if not self.read_only:
            return [self._queues.get((topic, q)) for q in queue_ids]
        if not refresh:
            loaded = [self._queues.get((topic, q)) for q in queue_ids]
            if all(cq is not None for cq in loaded):
                return loaded
        cl_min = self.commit_log.min_offset()
        queues: list[ConsumeQueue | None] = []
        present: set[str] | None = None   # the topic's queue directories, listed once for all its new queues
        for queue_id in queue_ids:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                if present is None:
                    present = self._queue_dir_names(topic)
                queues.append(self._load_queue(topic, queue_id, cl_min) if str(queue_id) in present else None)
                continue
            if not refresh:
                queues.append(cq)
                continue
            cq.refresh(cl_min)
            queues.append(cq)
        return queues

    def _queue_dir_names(self, topic: str) -> set[str]:
        """Names of the directories in ``consumequeue/<topic>/`` (none when it is missing)."""
        try:
            with os.scandir(self.root / "consumequeue" / topic) as it:
                return {e.name for e in it if e.is_dir()}
        except (FileNotFoundError, NotADirectoryError):
            return set()

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id)
        return cq.min_offset() if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queue(topic, queue_id)
        return cq.max_offset() if cq else 0

    def commit_log_min_offset(self) -> int:
        return self.commit_log.min_offset()

    def commit_log_max_offset(self) -> int:
        return self.commit_log.max_offset()

    def last_store_timestamp(self, topic: str, queue_id: int) -> int | None:
        cq = self._queue(topic, queue_id)
        if cq is None or cq.max_offset() <= cq.min_offset():
            return None
        ts = self.commit_log.store_timestamp_at(cq.unit(cq.max_offset() - 1)[0])
        return ts if ts >= 0 else None

    # --- reading (bulk) -----------------------------------------------------------------------
    def read_cq_units(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
        cq = self._queue(topic, queue_id)
        return cq.read_units(start, end) if cq else np.empty(0, dtype=CQ_DTYPE)

    def peek_cq_units(self, topic: str, queue_id: int, start: int, end: int) -> np.ndarray:
        """Units [start, end) clamped to the queue, not checked against the commit log: for a look at
        their tags codes (the broker's long polling), where a reader that hands out records checks them."""
        cq = self._queue(topic, queue_id)
        return cq.clamped_units(start, end)[1] if cq else np.empty(0, dtype=CQ_DTYPE)

    def index_buffer(self, topic: str, queue_id: int, index: int,
                     max_units: int) -> tuple[int, int, np.ndarray | None] | None:
        """``ConsumeQueue.getIndexBuffer(index)`` as QUERY_CONSUME_QUEUE reads it: None when the queue does
        not exist (``getConsumeQueue`` is null), else ``(min, max, units)`` where ``units`` are at most
        ``max_units`` units from ``index`` to the end of the consume-queue file holding it (or the queue's
        max), unchecked against the commit log, and None when ``index`` is below the min or not written."""
        cq = self._queue(topic, queue_id)
        if cq is None:
            return None
        lo, hi = cq.min_offset(), cq.max_offset()
        if index < lo or index >= hi or cq.queue.find(index * codec.CQ_UNIT_SIZE) is None:
            return lo, hi, None
        end = min(cq.file_end_index(index), hi, index + max(max_units, 0))
        return lo, hi, cq.raw_units(index, end) if end > index else np.empty(0, dtype=CQ_DTYPE)

    def read_range(self, topic: str, queue_id: int, start: int, end: int, *, broker_name: str | None = None,
                   columns: Sequence[str] | None = None, tags: Collection[str] | None = None,
                   batch_bytes: int = BATCH_BYTES,
                   check_crc: bool = False) -> Iterator[pa.RecordBatch]:
        """Arrow RecordBatches for queue offsets [start, end) (end clamped to the queue's max).

        Raises StoreError when ``start`` is below the queue's min offset (data removed by retention).
        ``check_crc`` verifies every row's BODYCRC (CorruptStoreError naming file and offset).
        """

        cq = self._queue(topic, queue_id)
        lo = cq.min_offset() if cq else 0
        if start < lo:
            raise StoreError(f"{topic}/{queue_id}: start offset {start} is below the min offset {lo} "
                             "(removed by retention)", path=cq.directory if cq else self.root, offset=start)
        if cq is None:
            units, reread = np.empty(0, dtype=CQ_DTYPE), None
        else:
            # bulk_read checks every unit it reads against the header it decodes (once; a batch
            # that disagrees is read again from the queue before that is an error)
            start, units = cq.clamped_units(start, end)
            reread = cq.raw_units
        return bulk_read.read_range_batches(self.commit_log, units, start, topic=topic, queue_id=queue_id,
                                            broker_name=broker_name or self.broker_name,
                                            columns=columns, tags=tags, batch_bytes=batch_bytes,
                                            check_crc=check_crc, reread=reread)

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> MessageRecord:
        return self.commit_log.read_record(commit_log_offset, size)

    @property
    def offsets(self) -> ConsumerOffsetManager:
        """The broker's consumer offset table (config/consumerOffset.json)."""
        from rocketstream.store.meta.offsets import ConsumerOffsetManager

        return ConsumerOffsetManager(self.root, read_only=self.read_only)

    def __repr__(self) -> str:
        return f"MessageStore({str(self.root)!r}, read_only={self.read_only})"
