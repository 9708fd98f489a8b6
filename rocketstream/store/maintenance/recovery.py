"""Writer start-up discipline (``DefaultMessageStore.load``/``recover``): commit-log recovery
(normal from the third-to-last file; abnormal from the file the checkpoint points at), consume-queue
repair forward from the commit log, the reput catch-up, and the index catch-up (``rebuild_index``).
The ``lock`` file is ``files/lock.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import numpy as np

from rocketstream import codec
from rocketstream.errors import CorruptStoreError
from rocketstream.store.files.checkpoint import StoreCheckpoint
from rocketstream.store.files.commit_log import CommitLog
from rocketstream.store.files.consume_queue import ConsumeQueue
from rocketstream.store.files.index_writer import IndexWriter, record_keys
from rocketstream.store.maintenance.layout import LMQ_PREFIX
from rocketstream.store.write.dispatch import Dispatcher, is_dispatchable

log = logging.getLogger(__name__)


def _first_record_ok_for_abnormal(cl: CommitLog, index: int, min_timestamp: int) -> bool:
    """``CommitLog.isMappedFileMatchedRecover``: V1/V2 magic, non-zero STORETIMESTAMP <= checkpoint minimum."""
    mf = cl.queue.files[index]
    _, magic = codec.INT32_PAIR.unpack_from(mf.mm, 0)
    if magic not in (codec.MAGIC_V1, codec.MAGIC_V2):
        return False
    ts = cl.store_timestamp_at(mf.file_from_offset)
    return ts != 0 and ts <= min_timestamp


def _repair_tail(cq: ConsumeQueue, cl_min: int, scanned_from: int, records: tuple[np.ndarray, np.ndarray]) -> bool:
    """Repeat ConsumeQueue.repair_tail while it removes whole files (the new last file is checked too)."""
    cut = False
    while cq.repair_tail(cl_min, scanned_from, records):
        cut = True
    return cut


def recover(cl: CommitLog, queues: Iterable[ConsumeQueue], dispatcher: Dispatcher, checkpoint: StoreCheckpoint,
            *, abnormal: bool, check_crc: bool, index: IndexWriter | None = None) -> int:
    """Recover the commit log and the consume queues; returns the commit-log end offset.

    The commit log is cut only where a record fails the checks ``CommitLog.checkMessageAndReturnSize``
    makes (``CommitLog.scan``): normal recovery scans from the third-to-last file
    (``CommitLog.recoverNormally``), abnormal from the newest file whose first record is older than the
    checkpoint (``recoverAbnormally``). Nothing a consume queue holds can shorten the commit log.

    Consume queues are derived data, repaired forward: ``ConsumeQueue.recover`` keeps the valid unit
    prefix; beyond Java, each queue's last file is checked against the record headers its units point
    to (units below the commit-log minimum are expired, not damaged — docs/store-format.md) and a
    disagreeing unit is cut; then every queue that ends before records the scan saw for it — cut,
    lost, or abnormal shutdown — is re-dispatched from its own end (the reput catch-up of
    ``DefaultMessageStore.recover``).

    ``index``: entries pointing at or beyond the recovered end are removed, then every record after
    the last one indexed is indexed (``rebuild_index``).
    """
    queues = list(queues)
    for cq in queues:
        cq.recover()
    files = cl.queue.files
    if not files:
        for cq in queues:          # no commit log at all: every unit would dangle (Java destroyLogics)
            cq.queue.truncate_dirty(-1)
            cq.min_logic_offset = cq.max_physic_offset = 0
        if index is not None:
            index.truncate(0, lambda offset: 0)
        return 0
    if abnormal:
        min_ts = checkpoint.min_timestamp()
        start_index = next((i for i in range(len(files) - 1, -1, -1)
                            if _first_record_ok_for_abnormal(cl, i, min_ts)), 0)
    else:
        start_index = max(len(files) - 3, 0)
    scan_start = files[start_index].file_from_offset
    cl_min = cl.queue.min_offset()
    last_seen: dict[tuple[str, int], int] = {}   # (topic, queue) -> last queue offset in the scan
    # Records that consume-queue units point at are checked in bulk (they have their units, so they
    # cannot make a queue lag); the others are walked one by one and noted.
    scan = cl.scan(scan_start, check_crc=check_crc, known_starts=_unit_starts(queues, scan_start))
    for head in scan:
        if is_dispatchable(head.sys_flag):
            last_seen[head.topic, head.queue_id] = head.queue_offset
    cl.last_store_timestamp = max(cl.last_store_timestamp, scan.max_store_timestamp)
    process = scan.end
    if scan.problem is not None:
        log.warning("commit log %s: %s at offset %d; recovery cuts the commit log there (%d bytes)",
                    scan.problem_path, scan.problem, process, cl.queue.max_offset() - process)
    cl.queue.truncate_dirty(process)
    if index is not None:
        index.truncate(process, cl.store_timestamp_at)
    records = scan.validated()
    repaired = [cq for cq in queues if _repair_tail(cq, cl_min, scan_start, records)]
    if repaired or max((cq.max_physic_offset for cq in queues), default=0) > process:
        for cq in queues:
            cq.truncate_dirty_logic_files(process)
    # Reput catch-up: records beyond every queue's end get their units now (4.x reputFromOffset);
    # after a crash everything from the scan start is dispatched again (put skips what is there);
    # queues whose tail was cut or lost are replayed from their own end.
    reput = max(max((cq.max_physic_offset for cq in queues), default=0), cl_min)
    if abnormal:
        reput = min(reput, scan_start)
    by_key = {(cq.topic, cq.queue_id): cq for cq in queues}
    for key, last in last_seen.items():
        seen = by_key.get(key)
        if seen is None:                   # a queue the scan saw has no consume queue at all
            reput = cl_min
        elif last >= seen.max_offset():
            reput = min(reput, max(seen.max_physic_offset, cl_min))
    for cq in repaired:
        reput = min(reput, max(cq.max_physic_offset, cl_min))
    if reput < process:
        _replay(cl, dispatcher, queues, reput, process)
    if index is not None:
        rebuild_index(cl, index, process)
    return process


def rebuild_index(cl: CommitLog, index: IndexWriter, end: int) -> int:
    """Index every record in the commit log after the last one the index holds, up to ``end``
    (Java re-dispatches them after an abnormal exit, ``CommitLogDispatcherBuildIndex``; a store whose
    writer kept no index - an older rocketstream, or a broker with messageIndexEnable=false - is
    indexed from its first record). Returns the number of keys put."""
    cl_min = cl.queue.min_offset()
    last = index.resume_offset()
    done = 0
    if last is None or last < cl_min:
        start = cl_min
    elif last >= end:
        return 0
    else:
        try:
            size = cl.read_record(last).total_size
        except CorruptStoreError:   # no record starts there: its whole file again (puts below last are skipped)
            mf = cl.find_file(last)
            start = cl_min if mf is None else max(mf.file_from_offset, cl_min)
        else:
            # the record at endPhyOffset again when some of its keys are missing (a crash, a deleted file)
            done = index.keys_done_at_end()
            start = last if done < _key_count(cl, last) else last + size
    if start >= end:
        return 0

    def records() -> Iterator[tuple[int, int, int, str, dict[str, str]]]:
        for head in cl.scan(start, check_crc=False):
            if head.offset >= end:
                break
            yield head.offset, head.sys_flag, head.store_timestamp, head.topic, head.properties()

    put = index.replay(records(), skip_at_end=done)
    log.info("index: %d keys of the records in [%d, %d) indexed from the commit log", put, start, end)
    return put


def _key_count(cl: CommitLog, offset: int) -> int:
    """Keys IndexService.buildIndex puts for the record at ``offset``."""
    rec = cl.read_record(offset)
    if rec.sys_flag & codec.TRANSACTION_MASK == codec.TRANSACTION_ROLLBACK:
        return 0
    props = rec.properties
    return len(record_keys(rec.topic, props.get(codec.PROPERTY_UNIQ_KEY), props.get(codec.PROPERTY_KEYS)))


def _unit_starts(queues: list[ConsumeQueue], start: int) -> np.ndarray | None:
    """Sorted commit-log offsets that units of ``queues`` point at, from ``start`` on. LMQ units
    point at other topics' records, so they say nothing about those records' own queues."""
    hints = [cq.record_starts_from(start) for cq in queues if not cq.topic.startswith(LMQ_PREFIX)]
    if not hints:
        return None
    starts = np.sort(np.concatenate(hints))
    return starts[np.r_[True, starts[1:] != starts[:-1]]] if len(starts) else starts


def _replay(cl: CommitLog, dispatcher: Dispatcher, queues: list[ConsumeQueue], start: int, end: int) -> None:
    """Dispatch the records in [start, end) that no unit points at yet (already validated by the
    scan, so no CRC again); records with units are passed over in bulk."""
    for head in cl.scan(start, check_crc=False, known_starts=_unit_starts(queues, start)):
        if head.offset >= end:
            break
        dispatcher.dispatch_head(head)
