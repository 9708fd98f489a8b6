"""The delay table a store was written with, read back from its SCHEDULE_TOPIC_XXXX units.

A delayed message is stored in SCHEDULE_TOPIC_XXXX, queue ``level - 1``, and its consume-queue unit
carries the delivery time instead of a tag hash: store time + the delay of its level
(``ScheduleMessageService.computeDeliverTimestamp``; docs/store-format.md). The table itself —
``messageDelayLevel`` — lives in the broker's broker.conf, not in the store. A writer that opens a
broker's store by path and re-dispatches such records with a different table would write wrong
delivery times (Java's schedule service would deliver those messages early or late). So before
recovery dispatches anything, each schedule queue's newest unit that still points at a record tells
the delay of its level; where it disagrees with the configured table, the store wins (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np

from rocketstream.codec import constants as fmt
from rocketstream.errors import StoreError
from rocketstream.store.files.commit_log import CommitLog
from rocketstream.store.files.consume_queue import PREFILL_SIZE, ConsumeQueue, units_of

log = logging.getLogger(__name__)


def levels_in_store(cl: CommitLog, queues: Iterable[ConsumeQueue], configured: Sequence[int]
                    ) -> Sequence[int] | dict[int, int]:
    """``configured`` (delay ms per level, level 1 first), or a level -> delay mapping corrected by
    what the store's schedule queues show."""
    table = {level: delay for level, delay in enumerate(configured, start=1)}
    changed = False
    cl_min = cl.queue.min_offset()
    for cq in queues:
        if cq.topic != fmt.SCHEDULE_TOPIC:
            continue
        seen = _newest_delay(cl, cq, cl_min)
        if seen is None:
            continue
        level, delay = seen
        if table.get(level) != delay:
            log.warning("%s: level %d was stored with a delay of %d ms, the configured messageDelayLevel says %s; "
                        "re-dispatch uses the store's %d ms", cq.directory, level, delay,
                        f"{table[level]} ms" if level in table else "no such level", delay)
            table[level] = delay
            changed = True
    return table if changed else configured


def _newest_delay(cl: CommitLog, cq: ConsumeQueue, cl_min: int) -> tuple[int, int] | None:
    """(level, delay ms) from the newest unit of ``cq`` whose record is still in the commit log."""
    for mf in reversed(cq.queue.files):
        units = units_of(mf)
        ok = np.flatnonzero((units["offset"] >= cl_min) & (units["size"] > 0) & (units["size"] != PREFILL_SIZE))
        for i in ok[::-1][:8]:   # a few tries: the very last unit may belong to a torn tail
            offset, size, tags_code = (int(units[i]["offset"]), int(units[i]["size"]), int(units[i]["tags_code"]))
            try:
                rec = cl.read_record(offset, size)
            except StoreError:   # a unit that disagrees with the commit log (recovery cuts it): try an older one
                continue
            raw = rec.properties.get(fmt.PROPERTY_DELAY)
            if rec.topic != fmt.SCHEDULE_TOPIC or raw is None or not raw.strip().lstrip("-").isdigit():
                continue
            level = int(raw)
            if level != cq.queue_id + 1:   # queue id = delay level - 1 (ScheduleMessageService.delayLevel2QueueId)
                continue
            return level, tags_code - rec.store_timestamp
        if len(ok):
            return None
    return None
