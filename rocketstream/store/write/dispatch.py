"""CommitLog -> ConsumeQueue and index dispatch (``ReputMessageService``, ``CommitLogDispatcherBuildConsumeQueue``,
``CommitLogDispatcherBuildIndex``): one 20-byte unit per dispatchable record, and its keys in ``index/``.

The put path dispatches synchronously right after the commit-log bytes are in the mapping, so there
is no reput thread; recovery replays records through ``dispatch_head`` (idempotent, as
``ConsumeQueue.putMessagePositionInfo`` is) and rebuilds the index separately (recovery.py).

A broker may defer the index part (:meth:`Dispatcher.defer_index`): a put's keys then wait in a list,
and :meth:`Dispatcher.drain_index` writes the keys of every put since the last drain with one
``IndexWriter.put`` - as ``ReputMessageService`` builds the index after the put was answered, in its own
thread. The broker drains once its answers are written; the store drains before anything reads or closes
the index (``MessageStore.drain_index``), so a query never misses a key that was put.
PREPARED and ROLLBACK records get no unit; ROLLBACK records are not indexed (PREPARED ones are, as
``IndexService.buildIndex`` does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from rocketstream import codec
from rocketstream.codec import CQ_DTYPE
from rocketstream.store.files.checkpoint import StoreCheckpoint
from rocketstream.store.files.commit_log import AppendResult, EncodedBatch, RecordHead
from rocketstream.store.files.consume_queue import ConsumeQueue
from rocketstream.store.files.index_writer import IndexRecords, IndexWriter


def is_dispatchable(sys_flag: int) -> bool:
    return sys_flag & codec.TRANSACTION_MASK in (codec.TRANSACTION_NOT_TYPE, codec.TRANSACTION_COMMIT)


def tags_code_of(topic: str, properties: dict[str, str], store_timestamp: int,
                delay_levels: Sequence[int] | Mapping[int, int]) -> int:
    """The unit's tagsCode: hash of TAGS, or the delivery time for SCHEDULE_TOPIC_XXXX
    (``CommitLog.checkMessageAndReturnSize``, ``ScheduleMessageService.computeDeliverTimestamp``)."""
    if topic != codec.SCHEDULE_TOPIC:
        return codec.tags_code(properties.get(codec.PROPERTY_TAGS))
    return codec.cq_tags_code(topic, properties, store_timestamp, delay_levels=delay_levels)


class Dispatcher:
    def __init__(self, get_queue: Callable[[str, int], ConsumeQueue], checkpoint: StoreCheckpoint | None,
                 delay_levels: Sequence[int] | Mapping[int, int], index: IndexWriter | None = None) -> None:
        self._get_queue = get_queue
        self.index = index   # None: messageIndexEnable=false
        self._checkpoint = checkpoint
        self._delay_levels = delay_levels
        self._pending: list[IndexRecords] = []   # deferred index keys, put order (defer_index)
        self._on_pending: Callable[[], None] | None = None

    def defer_index(self, on_pending: Callable[[], None] | None) -> None:
        """Deferred index dispatch: ``on_pending()`` is called when a put leaves keys waiting (the first
        since the last drain) and must see to it that :meth:`drain_index` runs soon; None: the keys are
        written by each put again (after a drain of what waits)."""
        if on_pending is None:
            self.drain_index()
        self._on_pending = on_pending

    def drain_index(self) -> None:
        """Write the keys waiting since the last drain, in put order."""
        pending, self._pending = self._pending, []
        if pending and self.index is not None:
            self.index.put_many_records(pending)

    def tags_code(self, topic: str, properties: dict[str, str], store_timestamp: int) -> int:
        return tags_code_of(topic, properties, store_timestamp, self._delay_levels)

    def dispatch_append(self, batch: EncodedBatch, result: AppendResult) -> None:
        """Units for one appended batch (same topic and queue), written with one CQ put; then its keys."""
        if batch.dispatch:
            self._put_units(batch, result)
        if self.index is not None:
            uniq, keys = batch.index_keys()
            offsets = (np.add(result.starts, result.physical_offset).tolist() if batch.count > 1
                       else [result.physical_offset])
            if self._on_pending is None:
                self.index.put_records(batch.topic, uniq, keys, offsets, result.store_timestamp)
                return
            self._pending.append((batch.topic, uniq, keys, offsets, result.store_timestamp))
            if len(self._pending) == 1:
                self._on_pending()

    def _put_units(self, batch: EncodedBatch, result: AppendResult) -> None:
        ts = result.store_timestamp
        cq = self._get_queue(batch.topic, batch.queue_id)
        codes = batch.tags_codes(ts, self.tags_code)
        if batch.count == 1:   # single put: no numpy round trip
            cq.put_one(result.queue_offset, result.physical_offset, int(result.sizes[0]), int(codes[0]))
        else:
            units = np.empty(batch.count, dtype=CQ_DTYPE)
            units["offset"] = np.add(result.starts, result.physical_offset)
            units["size"] = result.sizes
            units["tags_code"] = codes
            cq.put(result.queue_offset, units)
        if self._checkpoint is not None:
            self._checkpoint.logics_msg_timestamp = ts

    def dispatch_head(self, head: RecordHead) -> None:
        """Recovery replay of one scanned record (``CommitLog.scan``)."""
        if not is_dispatchable(head.sys_flag):
            return
        cq = self._get_queue(head.topic, head.queue_id)
        if head.offset + head.size <= cq.max_physic_offset:
            return                        # already dispatched (ConsumeQueue.putMessagePositionInfo)
        code = 0
        if len(head.props):
            code = self.tags_code(head.topic, head.properties(), head.store_timestamp)
        cq.put_one(head.queue_offset, head.offset, head.size, code)
        if self._checkpoint is not None:
            self._checkpoint.logics_msg_timestamp = head.store_timestamp
