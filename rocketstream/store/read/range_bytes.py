"""Stored bytes of consume-queue ranges, for a planner that packs ranges into tasks by their size (as Spark's
file sources pack files by their length).

Each 20-byte ConsumeQueue unit holds its message's stored size (``ConsumeQueue.putMessagePositionInfo``
writes commitLogOffset, size, tagsCode), so a range's bytes are a sum over the mapped units, never a read
of the commit log. A range of more than ``exact_units`` units is estimated from every k-th unit (an even
sample of at most about ``exact_units`` units): a 10 GiB backlog of 256-byte messages is 40 M units,
800 MB of consume queue, which a planner must not read whole. With tag codes only the units whose tagsCode
may match count (``bulk_read.tags_code_may_match``: what a tag scan will read).
"""

from __future__ import annotations

import numpy as np

from rocketstream.codec import CQ_UNIT
from rocketstream.errors import CorruptStoreError
from rocketstream.store.files.consume_queue import UNIT, ConsumeQueue, units_of
from rocketstream.store.read.bulk_read import tags_code_may_match

EXACT_UNITS = 1 << 20  # up to 20 MiB of units summed exactly per range; an even sample beyond
_UNPACKED = 8   # a piece of at most this many units is summed unit by unit, without numpy


def units_bytes(units: np.ndarray, codes: np.ndarray | None = None) -> int:
    """Stored bytes of the messages of ``units`` (CQ_DTYPE; of those whose tagsCode may be one of ``codes``)."""
    if codes is None and len(units) <= _UNPACKED:
        return sum(int(size) for size in units["size"].tolist())
    sizes = units["size"]
    if codes is not None:
        sizes = sizes[tags_code_may_match(units["tags_code"], codes)]
    return int(sizes.sum(dtype=np.int64))


def queue_range_bytes(cq: ConsumeQueue, start: int, end: int, codes: np.ndarray | None = None,
                      exact_units: int = EXACT_UNITS) -> int:
    """Stored bytes of the messages at queue offsets [start, end) clamped to the queue's [min, max) (of those
    whose tagsCode may be one of ``codes`` when given); exact up to ``exact_units`` units, else estimated
    from an even sample. An offset no consume-queue file covers is a CorruptStoreError naming the queue."""
    start = max(start, cq.min_offset())
    end = min(end, cq.max_offset())
    n = end - start
    if n <= 0:
        return 0
    step = max(1, -(-n // max(exact_units, 1)))
    total = 0
    at = start
    while at < end:
        mf = cq.queue.find(at * UNIT)
        if mf is None:
            raise CorruptStoreError(f"no consume-queue file covers logical offset {at}", path=cq.directory,
                                    offset=at * UNIT)
        first = (at * UNIT - mf.file_from_offset) // UNIT
        stop = min(cq.file_end_index(at), end)
        if codes is None and step == 1 and stop - at <= _UNPACKED:   # a few units (one-message queues): no numpy
            total += sum(CQ_UNIT.unpack_from(mf.mm, (first + i) * UNIT)[1] for i in range(stop - at))
            at = stop
            continue
        units = units_of(mf)[first:first + (stop - at):step]
        sizes = units["size"]
        if codes is not None:
            sizes = sizes[tags_code_may_match(units["tags_code"], codes)]
        total += int(sizes.sum(dtype=np.int64))
        at = stop
    return total * step


__all__ = ["EXACT_UNITS", "queue_range_bytes", "units_bytes"]
