"""Read-side queries of ``MessageStore``: ``DefaultMessageStore.getMessage``, the search by store time
(``ConsumeQueue.getOffsetInQueueByTime``), lookups by message id (``lookMessageByOffset``) and by key
(``IndexService.queryOffset``, see files/index_file.py).

``get_message`` keeps RocketMQ's signature, ``group`` included: RocketMQ uses it for statistics only,
and the broker's PullMessageProcessor passes it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from rocketstream.store.files.commit_log import CommitLog
    from rocketstream.store.files.consume_queue import ConsumeQueue
    from rocketstream.store.files.mapped_file import MappedFile
    from rocketstream.store.meta.config import StoreConfig

from rocketstream import codec
from rocketstream.codec import MessageRecord
from rocketstream.errors import CorruptStoreError, OptionError, StoreError
from rocketstream.store.files import index_file
from rocketstream.store.maintenance import layout as layouts
from rocketstream.store.write.messages import GetMessageResult, GetMessageStatus, RawMessageResult

_KEY_SEPARATOR = " "   # MessageConst.KEY_SEPARATOR
# get_message_raw: pulls of fewer messages (without a tag filter) take the per-record loop (measured:
# 32 messages cost 2x as much through numpy, 1024 messages 5x less)
VECTORIZED_MIN_BATCH = 64


def _key_matches(rec_topic: str, props: dict[str, str], topic: str, key: str, uniq_key: bool) -> bool:
    """MQAdminImpl.queryMessage's check of a record the index returned (hash collisions): the topic,
    and the key among KEYS split on " " (MessageConst.KEY_SEPARATOR) or, for an id query, UNIQ_KEY."""
    if rec_topic != topic:
        return False
    if uniq_key:
        return props.get(codec.PROPERTY_UNIQ_KEY) == key
    keys = props.get(codec.PROPERTY_KEYS)
    return keys is not None and key in keys.split(_KEY_SEPARATOR)


class StoreQueries:
    """The read-only queries of ``MessageStore`` (``DefaultMessageStore.getMessage``,
    ``getOffsetInQueueByTime``, ``lookMessageByOffset``, ``queryMessage``), over what they are given:
    the store root and config, its commit log, and ``consume_queue(topic, queue_id)`` (None when the
    queue has no directory)."""

    def __init__(self, root: Path, config: StoreConfig, commit_log: CommitLog,
                 consume_queue: Callable[[str, int], ConsumeQueue | None]) -> None:
        self.root = root
        self.config = config
        self.commit_log = commit_log
        self._queue = consume_queue

    # --- getMessage ---------------------------------------------------------------------------
    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    tags: Collection[str] | None = None) -> GetMessageResult:
        """RocketMQ 4.x ``DefaultMessageStore.getMessage`` over one CQ file, with the in-memory transfer
        limits (256 KiB / 32 messages by default; every page is treated as in memory).

        ``tags``: None, empty or containing "*" means all; otherwise a message passes when its
        tagsCode is one of the tags' hashes (or a ConsumeQueueExt address, which hides the code)
        and its TAGS string is one of ``tags``.
        """
        cq = self._queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset(), cq.max_offset()

        def result(status: GetMessageStatus, next_offset: int,
                   msgs: list[MessageRecord] | None = None) -> GetMessageResult:
            return GetMessageResult(status, next_offset, lo, hi, msgs or [])

        if hi == 0:
            return result(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0)
        if offset < lo:
            return result(GetMessageStatus.OFFSET_TOO_SMALL, lo)
        if offset == hi:
            return result(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset)
        if offset > hi:
            return result(GetMessageStatus.OFFSET_OVERFLOW_BADLY, hi)
        file_end = cq.file_end_index(offset)
        if cq.queue.find(offset * codec.CQ_UNIT_SIZE) is None:
            return result(GetMessageStatus.OFFSET_FOUND_NULL, file_end)
        cfg = self.config
        limit = max(cfg.max_filter_message_bytes, max_msg_nums * codec.CQ_UNIT_SIZE) // codec.CQ_UNIT_SIZE
        units = cq.raw_units(offset, min(file_end, hi, offset + limit))
        wanted = None if not tags or "*" in tags else set(tags)
        codes = None if wanted is None else {codec.tags_code(t) for t in wanted}
        cl = self.commit_log
        cl_min = cl.min_offset()
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        msgs: list[MessageRecord] = []
        size_sum = 0
        next_phy_file_start = -1
        examined = len(units)
        for i, (phys, size, code) in enumerate(units.tolist()):
            if msgs and (len(msgs) >= max_msg_nums
                         or size_sum + size > cfg.max_transfer_bytes_on_message_in_memory
                         or len(msgs) > cfg.max_transfer_count_on_message_in_memory - 1):
                examined = i
                break
            if phys < next_phy_file_start:
                continue
            if codes is not None and code not in codes and not codec.is_ext_address(code):
                continue   # an ext address hides the tags code: the record's TAGS decides below
            if phys < cl_min or cl.find_file(phys) is None:
                if not msgs:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = phys - phys % cl.file_size + cl.file_size
                continue
            rec = cl.read_record(phys, size, check_crc=True)   # never hand out a damaged body
            if wanted is not None and rec.tags not in wanted:
                continue
            msgs.append(rec)
            size_sum += size
            status = GetMessageStatus.FOUND
            next_phy_file_start = -1
        return result(status, offset + examined, msgs)

    # --- getMessage for the wire (PullMessageProcessor) -----------------------------------------
    def get_message_raw(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                        tags_codes: Collection[int] | None = None,
                        record_filter: Callable[[memoryview], bool] | None = None) -> RawMessageResult:
        """``DefaultMessageStore.getMessage`` as the broker's PullMessageProcessor calls it: the same
        statuses, next offsets and transfer limits as :meth:`get_message`, but the result is the stored
        record bytes (views of the commit-log mapping, nothing decoded) and the filter is the tags code
        only (``ExpressionMessageFilter.isMatchedByConsumeQueue``: ``codeSet.contains((int) tagsCode)``),
        as the Java broker filters; the client completes the filter on the TAGS string.

        ``tags_codes``: None = every message (subscription ``*``). ``record_filter``: a per-message
        check of the record's bytes after the tags code matched (``isMatchedByCommitLog``, e.g. SQL92);
        a record it refuses is skipped like one of another tag. Each record's TOTALSIZE and PHYSICALOFFSET
        are checked against its consume-queue unit (two integers, not a decode).

        ``buffers`` of the result are segments of the commit log in queue order whose concatenation is
        the pull body: records that lie back to back in the commit log (a one-queue topic's always do)
        come as one segment. The views stay valid while the file is mapped: join them at once.
        Without a ``record_filter`` the units of the range are examined as numpy arrays
        (:func:`_select_units`); units pointing below the commit log's min offset or into a missing
        file, every ``record_filter`` and batches under :data:`VECTORIZED_MIN_BATCH` messages without a
        tag filter take the per-record loop (:meth:`_get_raw_per_record`).
        """
        cq = self._queue(topic, queue_id)
        if cq is None:
            return RawMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset(), cq.max_offset()
        if hi == 0:
            return RawMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return RawMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return RawMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return RawMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        file_end = cq.file_end_index(offset)
        if cq.queue.find(offset * codec.CQ_UNIT_SIZE) is None:
            return RawMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, file_end, lo, hi)
        cfg = self.config
        # DefaultMessageStore.getMessage: maxFilterMessageCount = max(16000, maxMsgNums * CQ_STORE_UNIT_SIZE) bytes
        limit = max(cfg.max_filter_message_bytes, max_msg_nums * codec.CQ_UNIT_SIZE) // codec.CQ_UNIT_SIZE
        end = min(file_end, hi, offset + limit)
        # numpy costs a few dozen calls per pull whatever its size: a small batch without a tag filter (the
        # per-record loop then reads about as many units as it returns) is cheaper one record at a time
        small = min(max_msg_nums, cfg.max_transfer_count_on_message_in_memory) < VECTORIZED_MIN_BATCH
        out = None if record_filter is not None or (small and tags_codes is None) else \
            self._get_raw_vectorized(cq, offset, end, max_msg_nums, tags_codes)
        if out is None and small and tags_codes is None and record_filter is None:
            out = self._get_raw_all_small(cq, offset, end, max_msg_nums)
        if out is None:
            out = self._get_raw_per_record(cq, offset, end, max_msg_nums, tags_codes, record_filter)
        out.min_offset, out.max_offset = lo, hi
        return out

    def _get_raw_vectorized(self, cq: ConsumeQueue, offset: int, end: int, max_msg_nums: int,
                            tags_codes: Collection[int] | None) -> RawMessageResult | None:
        """The units of [offset, end) as numpy arrays, read in growing chunks (a full batch usually ends
        long before ``end``); None when a unit points where the per-record loop must decide (below the
        commit log's min offset or into no file: MESSAGE_WAS_REMOVING and rollNextFile)."""
        cfg = self.config
        cl = self.commit_log
        cl_min = cl.min_offset()
        codes = None if tags_codes is None else np.fromiter(tags_codes, dtype=np.int64, count=len(tags_codes))
        chosen: list[np.ndarray] = []
        count = total = 0
        examined = end - offset
        at, step = offset, max(min(max_msg_nums, cfg.max_transfer_count_on_message_in_memory), 1) + 1
        while at < end:
            stop = min(end, at + step)
            units = cq.raw_units(at, stop)
            phys = units["offset"].astype(np.int64)
            if len(phys) and int(phys.min()) < cl_min:
                return None
            cut, picked = _select_units(units, codes, count, total, max_msg_nums,
                                        cfg.max_transfer_bytes_on_message_in_memory,
                                        cfg.max_transfer_count_on_message_in_memory)
            if len(picked):
                chosen.append(units[picked])
                count += len(picked)
                total += int(units["size"][picked].astype(np.int64).sum())
            if cut < len(units):
                examined = at - offset + cut
                break
            at, step = stop, step * 4
        if not count:
            return RawMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset + examined, 0, 0)
        units = chosen[0] if len(chosen) == 1 else np.concatenate(chosen)
        segments = self._segments(units["offset"].astype(np.int64), units["size"].astype(np.int64))
        if segments is None:
            return None
        return RawMessageResult(GetMessageStatus.FOUND, offset + examined, 0, 0, segments, total, count)

    def _segments(self, phys: np.ndarray, sizes: np.ndarray) -> list[memoryview] | None:
        """Views of the commit log holding the records at ``phys`` (queue order), records adjacent in the
        commit log merged into one view; each record's TOTALSIZE and PHYSICALOFFSET checked against its
        unit (:func:`_check_record` in bulk). None when a record's file is not mapped."""
        cl = self.commit_log
        file_size = cl.file_size
        if int(phys[0]) // file_size == int(phys[-1]) // file_size:   # queue order: phys ascends
            runs = [(0, len(phys))]
        else:
            file_index = phys // file_size
            cuts = (np.flatnonzero(file_index[1:] != file_index[:-1]) + 1).tolist()
            runs = list(zip([0, *cuts], [*cuts, len(phys)], strict=True))
        segments: list[memoryview] = []
        for lo, hi in runs:
            p, s = phys[lo:hi], sizes[lo:hi]
            mf = cl.find_file(int(p[0]))
            if mf is None:
                return None
            pos = p - mf.file_from_offset
            bad = (s <= codec.POS_SYS_FLAG) | (pos < 0) | (pos + s > mf.file_size)
            if bad.any():
                i = int(np.argmax(bad))
                raise CorruptStoreError(f"consume-queue unit (offset {int(p[i])}, size {int(s[i])}) leaves the "
                                        f"commit-log file", path=mf.path, offset=int(p[i]))
            # TOTALSIZE (4 bytes at 0) and PHYSICALOFFSET (8 bytes at 28) of every record in one gather
            head = mf.array[pos[:, None] + _SIZE_AND_PHYS].view(_SIZE_AND_PHYS_DTYPE)[:, 0]
            stored_total, stored_phys = head["total"], head["phys"]
            bad = (stored_total != s) | (stored_phys != p)
            if bad.any():
                i = int(np.argmax(bad))
                raise CorruptStoreError(
                    f"record header (TOTALSIZE {int(stored_total[i])}, PHYSICALOFFSET {int(stored_phys[i])}) does not "
                    f"match its consume-queue unit (size {int(s[i])}, offset {int(p[i])})", path=mf.path,
                    offset=int(p[i]))
            # runs of records back to back in the file: [pos[a], pos[b-1] + s[b-1])
            ends = pos + s
            breaks = np.flatnonzero(pos[1:] != ends[:-1])
            view = memoryview(mf.mm)
            if not len(breaks):
                segments.append(view[int(pos[0]):int(ends[-1])])
                continue
            firsts = [int(pos[0]), *pos[breaks + 1].tolist()]
            lasts = [*ends[breaks].tolist(), int(ends[-1])]
            segments.extend(view[a:b] for a, b in zip(firsts, lasts, strict=True))
        return segments

    def _get_raw_all_small(self, cq: ConsumeQueue, offset: int, end: int,
                           max_msg_nums: int) -> RawMessageResult | None:
        """:meth:`_get_raw_per_record` for a small pull without any filter (a consumer's usual pull of 32):
        every unit is taken until the batch is full, so the loop keeps only the batch limits, the record check
        and the segments; None (nothing decided) when a unit points below the commit log's min offset or into
        no mapped file, which the general loop decides (MESSAGE_WAS_REMOVING, rollNextFile)."""
        cfg = self.config
        cl = self.commit_log
        cl_min = cl.min_offset()
        max_bytes = cfg.max_transfer_bytes_on_message_in_memory
        # DefaultMessageStore.isTheBatchFull: never full before the first message; then full at
        # maxMsgNums or maxTransferCountOnMessageInMemory messages, or when the next one would pass the bytes
        max_count = max(min(max_msg_nums, cfg.max_transfer_count_on_message_in_memory), 1)
        buffers: list[memoryview] = []
        count = size_sum = 0
        mf: MappedFile | None = None
        view = memoryview(b"")              # of mf.mm: struct reads a memoryview at half the cost of an mmap
        mf_from = mf_end = mf_size = 0      # an empty span: the first record looks its file up
        seg_a = seg_b = -1                  # the open segment [seg_a, seg_b) of view
        head = _SIZE_THEN_PHYS.unpack_from
        min_size = codec.POS_SYS_FLAG
        at, step = offset, max_count + 1
        while at < end:
            stop = min(end, at + step)
            for phys, size, _code in _unit_values(cq, at, stop):
                if count >= max_count or (size_sum + size > max_bytes and count):
                    break
                if not mf_from <= phys < mf_end:
                    if phys < cl_min:
                        return None
                    found = cl.find_file(phys)
                    if found is None:
                        return None
                    if seg_a >= 0:
                        buffers.append(view[seg_a:seg_b])
                        seg_a = seg_b = -1
                    mf, view = found, memoryview(found.mm)
                    mf_from, mf_size = found.file_from_offset, found.file_size
                    mf_end = mf_from + mf_size
                pos = phys - mf_from
                # _check_record inline: TOTALSIZE and PHYSICALOFFSET of the record must be the unit's
                if size <= min_size or pos + size > mf_size or head(view, pos) != (size, phys):
                    _check_record(mf, phys, size)   # type: ignore[arg-type]   # raises, naming what is wrong
                if pos != seg_b:
                    if seg_a >= 0:
                        buffers.append(view[seg_a:seg_b])
                    seg_a = pos
                seg_b = pos + size
                count += 1
                size_sum += size
            else:
                at, step = stop, step * 4
                continue
            break
        if not count:   # no unit in [offset, end): the callers never ask so (end > offset)
            return None
        buffers.append(view[seg_a:seg_b])
        # every unit examined was taken: the next offset is right after the last one
        return RawMessageResult(GetMessageStatus.FOUND, offset + count, 0, 0, buffers, size_sum, count)

    def _get_raw_per_record(self, cq: ConsumeQueue, offset: int, end: int, max_msg_nums: int,
                            tags_codes: Collection[int] | None,
                            record_filter: Callable[[memoryview], bool] | None) -> RawMessageResult:
        """The per-unit loop of ``DefaultMessageStore.getMessage`` (every case, one record at a time);
        records back to back in one file are merged into one segment as in the numpy path."""
        cfg = self.config
        cl = self.commit_log
        cl_min = cl.min_offset()
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        buffers: list[memoryview] = []
        count = size_sum = 0
        next_phy_file_start = -1
        examined = end - offset
        max_bytes = cfg.max_transfer_bytes_on_message_in_memory
        max_count = cfg.max_transfer_count_on_message_in_memory
        # the units are read in growing chunks: a full batch usually ends long before the 800 units
        # maxFilterMessageCount allows, and turning units into Python ints is the cost here (one
        # struct.iter_unpack per chunk: a third of what a numpy copy and tolist cost for 33 units)
        at, step, full = offset, max(min(max_msg_nums, max_count), 1) + 1, False
        mf: MappedFile | None = None
        mf_from = mf_end = max(cl_min, 0)   # an empty span: the first record looks its file up
        mm = memoryview(b"")                # of mf.mm (struct reads a memoryview at half the cost of an mmap)
        seg_mf: MappedFile | None = None    # the open segment: [seg_a, seg_b) of seg_mf
        seg_a = seg_b = 0
        head = _SIZE_THEN_PHYS.unpack_from
        while at < end and not full:
            stop = min(end, at + step)
            for i, (phys, size, code) in enumerate(_unit_values(cq, at, stop), at - offset):
                if count and (count >= max_msg_nums or size_sum + size > max_bytes
                              or count > max_count - 1):   # DefaultMessageStore.isTheBatchFull
                    examined, full = i, True
                    break
                if phys < next_phy_file_start:
                    continue
                if tags_codes is not None and _java_int(code) not in tags_codes:
                    continue
                if not mf_from <= phys < mf_end:   # the file of the previous record usually holds this one too
                    mf = cl.find_file(phys) if phys >= cl_min else None
                    mf_from, mf_end = (mf.file_from_offset, mf.end_offset) if mf is not None else (0, 0)
                    mm = memoryview(mf.mm) if mf is not None else memoryview(b"")
                if mf is None:
                    if not count:
                        status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    next_phy_file_start = phys - phys % cl.file_size + cl.file_size
                    continue
                # _check_record inline (the call is a fifth of the loop's cost): TOTALSIZE and
                # PHYSICALOFFSET of the record must be the unit's
                pos = phys - mf_from
                if size <= codec.POS_SYS_FLAG or pos + size > mf_end - mf_from or head(mm, pos) != (size, phys):
                    _check_record(mf, phys, size)   # raises the CorruptStoreError naming what is wrong
                if record_filter is not None and not record_filter(mm[pos:pos + size]):
                    continue   # isMatchedByCommitLog
                if mf is seg_mf and pos == seg_b:
                    seg_b += size
                else:
                    if seg_mf is not None:
                        buffers.append(memoryview(seg_mf.mm)[seg_a:seg_b])
                    seg_mf, seg_a, seg_b = mf, pos, pos + size
                count += 1
                size_sum += size
                status = GetMessageStatus.FOUND
                next_phy_file_start = -1
            at, step = stop, step * 4
        if seg_mf is not None:
            buffers.append(memoryview(seg_mf.mm)[seg_a:seg_b])
        return RawMessageResult(status, offset + examined, 0, 0, buffers, size_sum, count)

    def raw_record(self, phys: int) -> bytes | None:
        """The stored bytes of the record at commit-log offset ``phys`` (``selectOneMessageByOffset``:
        the size read from the record's own TOTALSIZE); None when no record starts there."""
        cl = self.commit_log
        if phys < cl.min_offset() or phys >= cl.max_offset():
            return None
        mf = cl.find_file(phys)
        if mf is None:
            return None
        pos = phys - mf.file_from_offset
        if pos + codec.POS_SYS_FLAG > mf.file_size:
            return None
        total, magic = codec.INT32_PAIR.unpack_from(mf.mm, pos)
        if magic not in (codec.MAGIC_V1, codec.MAGIC_V2) or total <= codec.POS_SYS_FLAG \
                or pos + total > mf.file_size:
            return None
        (stored_phys,) = codec.INT64.unpack_from(mf.mm, pos + codec.POS_PHYSICAL_OFFSET)
        if stored_phys != phys:
            return None
        return mf.mm[pos:pos + total]

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        """``getEarliestMessageTime``: store time of the message at the queue's min offset, -1 if none."""
        cq = self._queue(topic, queue_id)
        if cq is None or cq.max_offset() <= cq.min_offset():
            return -1
        return self.commit_log.store_timestamp_at(cq.unit(cq.min_offset())[0])

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        """``getMessageStoreTimeStamp``: store time of the message at queue ``offset``, -1 if none."""
        cq = self._queue(topic, queue_id)
        if cq is None or not cq.min_offset() <= offset < cq.max_offset():
            return -1
        return self.commit_log.store_timestamp_at(cq.unit(offset)[0])

    # --- search by time -----------------------------------------------------------------------
    def _unit_time(self, cq: ConsumeQueue, index: int, cl_min: int) -> int:
        """Store time of unit ``index``; -1 when it points below the commit log (too early)."""
        phys = cq.unit(index)[0]
        if phys < cl_min:
            return -1
        return self.commit_log.store_timestamp_at(phys)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """4.x "nearest" semantics (``ConsumeQueue.getOffsetInQueueByTime``): an exact match, else the
        closer neighbour (ties to the
        earlier one; only one side present -> that side). We binary-search the whole queue instead
        of one CQ file chosen by file mtime; since store times never decrease this is the same as
        choosing the file by its units' timestamps."""
        cq = self._queue(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset(), cq.max_offset()
        if hi <= lo:
            return lo
        cl_min = self.commit_log.min_offset()
        left = right = None
        left_t = right_t = 0
        low, high = lo, hi - 1
        while low <= high:
            mid = (low + high) // 2
            t = self._unit_time(cq, mid, cl_min)
            if t == timestamp_ms:
                return mid
            if t > timestamp_ms:
                right, right_t, high = mid, t, mid - 1
            else:
                left, left_t, low = mid, t, mid + 1
        if left is None:
            return right if right is not None else lo
        if right is None:
            return left
        return left if timestamp_ms - left_t <= right_t - timestamp_ms else right

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int, boundary: str = "lower") -> int:
        """5.x searchOffset: LOWER = first message stored at or after the time (max offset when
        none); UPPER = last message stored at or before it (min offset when none). Clamped to
        [min, max]."""
        if boundary not in ("lower", "upper"):
            raise OptionError("boundary", "must be 'lower' or 'upper'", boundary)
        cq = self._queue(topic, queue_id)
        if cq is None:
            return 0
        lo, hi = cq.min_offset(), cq.max_offset()
        cl_min = self.commit_log.min_offset()
        a, b = lo, hi
        while a < b:   # first index whose time is > (upper) or >= (lower) the target
            mid = (a + b) // 2
            t = self._unit_time(cq, mid, cl_min)
            if t < timestamp_ms or (boundary == "upper" and t == timestamp_ms):
                a = mid + 1
            else:
                b = mid
        return a if boundary == "lower" else max(a - 1, lo)

    # --- lookups ------------------------------------------------------------------------------
    def message_by_msg_id(self, msg_id: str) -> MessageRecord:
        """An offset message id decodes to its physical offset; otherwise ``msg_id`` is taken as a
        UNIQ_KEY and found by searching the commit-log bytes (newest file first)."""
        cl = self.commit_log
        if not msg_id.strip():
            raise OptionError("msgId", "must not be empty", msg_id)
        text = msg_id.strip().upper()
        try:
            _, phys = codec.decode_offset_msg_id(text)
        except OptionError:
            phys = None
        if phys is not None and cl.min_offset() <= phys < cl.max_offset():
            rec = self._record_if_any(phys)
            if rec is not None and rec.offset_msg_id == text:
                return rec
        # No \x02 after the value: 4.9.1-5.1.4 brokers write none after the last property (spec
        # 1.6). A longer value with the same prefix, or bytes of a body, are ruled out below by
        # decoding the record that holds the hit and comparing its UNIQ_KEY.
        needle = f"{codec.PROPERTY_UNIQ_KEY}\x01{msg_id.strip()}".encode()
        end = cl.max_offset()
        for mf in reversed(list(cl.queue.files)):
            limit = min(mf.file_size, max(end - mf.file_from_offset, 0))
            hit = mf.mm.rfind(needle, 0, limit)
            while hit >= 0:
                rec = self._record_containing(mf, hit)
                if rec is not None and rec.uniq_key == msg_id.strip():
                    return rec
                hit = mf.mm.rfind(needle, 0, hit)
        raise StoreError(f"no message with id {msg_id!r}", path=cl.directory)

    def _record_if_any(self, phys: int) -> MessageRecord | None:
        """The record starting exactly at ``phys``, or None when the bytes there are not one."""
        try:
            return self.commit_log.read_record(phys)
        except CorruptStoreError:
            return None   # not a record start: the id was a UNIQ_KEY that happens to look like one

    def _record_containing(self, mf: MappedFile, pos: int) -> MessageRecord | None:
        target = mf.file_from_offset + pos
        for offset, rec in self.commit_log.iter_records(mf.file_from_offset, check_crc=False):
            if rec is None or offset > target:
                return None
            if offset + rec.total_size > target:
                return rec
        return None

    # --- query by key (DefaultMessageStore.queryMessage) ---------------------------------------
    def query_message(self, topic: str, key: str, *, max_num: int = index_file.MAX_MSGS_NUM_BATCH,
                      begin_ms: int = 0, end_ms: int = index_file.MAX_TIMESTAMP,
                      uniq_key: bool = False) -> list[MessageRecord]:
        """Messages of ``topic`` whose KEYS (split on single spaces) hold ``key`` - or, with
        ``uniq_key``, whose UNIQ_KEY is ``key`` - stored in [begin_ms, end_ms]; at most
        min(max_num, maxMsgsNumBatch = 64) of them, the newest, in commit-log order.

        With ``index/`` files (every real broker's store): DefaultMessageStore.queryMessage - offsets
        from IndexService.queryOffset (index times are whole seconds after the file's beginTimestamp,
        as Java compares them), offsets below the commit-log min (expired) or beyond its end skipped,
        each record read - then MQAdminImpl.queryMessage's check against hash collisions: same topic,
        key among KEYS (or UNIQ_KEY equal). DefaultMessageStore's three rounds only repeat with the same
        ``end`` when nothing was readable, so one round answers the same. Records appended after the
        index's last endPhyOffset (by our writer: we do not write IndexFiles) are found by scanning
        that tail of the commit log, and count first, being the newest.

        Without index files (our own stores): a scan of the whole commit log, reading the KEYS of each
        record of ``topic`` (exact store times; a commit-log file not holding the key's UTF-8 bytes at
        all is skipped without walking its records). Like IndexService.buildIndex, ROLLBACK records
        are never found.
        """
        if not topic:
            raise OptionError("topic", "a key query needs a topic", topic)
        if not key:
            raise OptionError("key", "must not be empty", key)
        if max_num <= 0:
            raise OptionError("max_num", "must be >= 1", max_num)
        limit = min(max_num, index_file.MAX_MSGS_NUM_BATCH)
        cl = self.commit_log
        cl_min, cl_max = cl.min_offset(), cl.max_offset()
        paths = layouts.index_files(self.root) if (self.root / "index").is_dir() else []
        with index_file.IndexService(paths, **index_file.configured_geometry(self.config.conf_path)) as index:
            indexed_end = index.indexed_end()
            scan_from = cl_min if indexed_end is None else self._tail_start(indexed_end, cl_min, cl_max)
            found = self._scan_for_key(topic, key, uniq_key, scan_from, cl_max, begin_ms, end_ms)[-limit:]
            if indexed_end is not None and len(found) < limit:
                result = index.query_offset(topic, key, limit - len(found), begin_ms, end_ms)
                for phys in sorted(set(result.phy_offsets)):
                    if phys < cl_min or phys >= cl_max:
                        continue   # expired by retention, or cut from the commit log after the index was written
                    rec = cl.read_record(phys)
                    if _key_matches(rec.topic, rec.properties, topic, key, uniq_key):
                        found.append(rec)
        return sorted(found, key=lambda r: r.physical_offset)

    def _tail_start(self, indexed_end: int, cl_min: int, cl_max: int) -> int:
        """Where the records the index does not cover begin: after the record at ``indexed_end``
        (the last one indexed), or the start of its commit-log file when no record starts there."""
        if indexed_end < cl_min:
            return cl_min
        if indexed_end >= cl_max:
            return cl_max
        rec = self._record_if_any(indexed_end)
        if rec is not None:
            return indexed_end + rec.total_size
        mf = self.commit_log.find_file(indexed_end)
        return cl_max if mf is None else max(mf.file_from_offset, cl_min)

    def _scan_for_key(self, topic: str, key: str, uniq_key: bool, start: int, end: int, begin_ms: int,
                      end_ms: int) -> list[MessageRecord]:
        """Records in [start, end) of ``topic`` matching ``key`` (query_message), oldest first."""
        cl = self.commit_log
        needle = key.encode("utf-8")
        offsets: list[int] = []
        offset = start
        while offset < end:
            mf = cl.find_file(offset)
            if mf is None:
                break
            file_end = min(mf.end_offset, end)
            if mf.mm.find(needle, offset - mf.file_from_offset, file_end - mf.file_from_offset) >= 0:
                scan = cl.scan(offset, check_crc=False)
                for head in scan:
                    if head.offset >= file_end:
                        break
                    if (head.topic == topic and begin_ms <= head.store_timestamp <= end_ms
                            and head.sys_flag & codec.TRANSACTION_MASK != codec.TRANSACTION_ROLLBACK
                            and needle in bytes(head.props)
                            and _key_matches(head.topic, head.properties(), topic, key, uniq_key)):
                        offsets.append(head.offset)
                else:
                    if scan.problem is not None and scan.end < file_end:
                        raise CorruptStoreError(f"record does not decode while searching for key {key!r}: "
                                                f"{scan.problem}", path=scan.problem_path, offset=scan.end)
            offset = mf.end_offset
        return [cl.read_record(o) for o in offsets]


def _java_int(code: int) -> int:
    """``tagsCode.intValue()``: the low 32 bits of the unit's tagsCode as a signed int."""
    code &= 0xFFFFFFFF
    return code - (1 << 32) if code >= 1 << 31 else code


def _select_units(units: np.ndarray, codes: np.ndarray | None, count: int, total: int, max_msg_nums: int,
                  max_bytes: int, max_count: int) -> tuple[int, np.ndarray]:
    """``DefaultMessageStore.getMessage``'s loop over consume-queue units as array operations, for units
    that all point into the commit log: (index of the unit where the batch is full - ``len(units)`` when
    it never is -, indices of the units before it that match the tags codes). ``count``/``total``: messages
    and bytes already taken from earlier chunks.

    ``isTheBatchFull`` runs for every unit before its tag check, with the unit's own size: the batch is
    full at unit i when something was taken and taken >= maxMsgNums, or taken bytes + size_i >
    maxTransferBytesOnMessageInMemory, or taken > maxTransferCountOnMessageInMemory - 1. The match is
    ``codeSet.contains((int) tagsCode)`` (ExpressionMessageFilter.isMatchedByConsumeQueue)."""
    sizes = units["size"].astype(np.int64)
    if codes is None:
        match = np.ones(len(units), dtype=bool)
    else:   # tagsCode.intValue(): the low 32 bits as a signed int
        low = (units["tags_code"].astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        match = np.isin(low, codes)
    m = match.astype(np.int64)
    taken = count + np.cumsum(m) - m                       # messages taken before unit i
    taken_bytes = total + np.cumsum(sizes * m) - sizes * m   # their bytes
    full = (taken > 0) & ((taken >= max_msg_nums) | (taken_bytes + sizes > max_bytes) | (taken > max_count - 1))
    cut = int(np.argmax(full)) if full.any() else len(units)
    return cut, np.flatnonzero(match[:cut])


_SIZE_AND_PHYS = np.r_[np.arange(4), np.arange(codec.POS_PHYSICAL_OFFSET, codec.POS_PHYSICAL_OFFSET + 8)]
_SIZE_AND_PHYS_DTYPE = np.dtype([("total", ">i4"), ("phys", ">i8")])


_SIZE_THEN_PHYS = struct.Struct(f">i{codec.POS_PHYSICAL_OFFSET - 4}xq")   # TOTALSIZE .. PHYSICALOFFSET


def _unit_values(cq: ConsumeQueue, start: int, end: int) -> list[tuple[int, int, int]]:
    """(commitLogOffset, size, tagsCode) of the consume-queue units [start, end) (``ConsumeQueue.raw_units``
    as Python ints; files must cover the range): one ``struct.iter_unpack`` of a copy of each file's
    bytes, no view of the mapping kept."""
    out: list[tuple[int, int, int]] = []
    for mf, p, n in cq.spans(start, end):
        units = codec.CQ_UNIT.iter_unpack(mf.mm[p:p + n - n % codec.CQ_UNIT_SIZE])
        if out:
            out.extend(units)
        else:
            out = list(units)
    return out


def _check_record(mf: MappedFile, phys: int, size: int) -> int:
    """Position in ``mf`` of the ``size`` bytes of the record at ``phys``; its TOTALSIZE and PHYSICALOFFSET
    must agree with the consume-queue unit that pointed here (never hand a client bytes that are not
    that record)."""
    pos = phys - mf.file_from_offset
    if size <= codec.POS_SYS_FLAG or pos + size > mf.file_size:
        raise CorruptStoreError(f"consume-queue unit (offset {phys}, size {size}) leaves the commit-log file",
                                path=mf.path, offset=phys)
    total, stored_phys = _SIZE_THEN_PHYS.unpack_from(mf.mm, pos)
    if total != size or stored_phys != phys:
        raise CorruptStoreError(f"record header (TOTALSIZE {total}, PHYSICALOFFSET {stored_phys}) does not match "
                                f"its consume-queue unit (size {size}, offset {phys})", path=mf.path, offset=phys)
    return pos
