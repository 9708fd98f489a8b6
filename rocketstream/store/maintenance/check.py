"""``MessageStore.check()``: every record's CRC, and commit log <-> consume queue agreement.

Only real disagreements are problems; what a healthy broker's store legitimately holds
(docs/store-format.md) is counted and described in ``CheckReport.notes`` instead:

* PROPERTIES with or without a trailing 0x02 and with bytes that are not UTF-8 decode as Java decodes
  them (``MessageDecoder.string2messageProperties``); the last byte of PROPERTIES is not an integrity
  signal.
* Units pointing below the commit log's min offset are expired (retention deleted their records;
  ``ConsumeQueue.correctMinOffset`` moves past them), not damage.
* A unit whose tagsCode is a ConsumeQueueExt address (``ConsumeQueueExt.isExtAddr``) is
  compared on offset and size only: its tags code lives in ``consumequeue_ext/``.
* LMQ and other multi-dispatch queues (``ConsumeQueue.multiDispatchLmqQueue``) hold units of
  records of another topic: each is checked against the queue names and offsets in its record's
  INNER_MULTI_DISPATCH / INNER_MULTI_QUEUE_OFFSET.
* Records at the tail of the commit log without units: the broker stopped before
  ``ReputMessageService`` dispatched them; recovery dispatches them forward.  Records without units
  *before* a dispatched record are problems.
* ``__CRC32#`` (5.x ``enabledAppendPropCRC``) is verified as ``CommitLog.checkMessageAndReturnSize``
  does under ``forceVerifyPropCRC``, in addition to BODYCRC.
"""

from __future__ import annotations

import mmap
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rocketstream import codec
from rocketstream.errors import CorruptStoreError, StoreError
from rocketstream.store.files.consume_queue import UNIT
from rocketstream.store.write.dispatch import is_dispatchable, tags_code_of

if TYPE_CHECKING:
    from rocketstream.store.files.commit_log import CommitLog
    from rocketstream.store.files.consume_queue import ConsumeQueue

LMQ_PREFIX = "%LMQ%"                          # MixAll.LMQ_PREFIX
PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
PROPERTY_CRC32 = "__CRC32#"                   # MessageConst.PROPERTY_CRC32
CRC32_RESERVED_LEN = len(PROPERTY_CRC32) + 1 + 10 + 1   # CommitLog.CRC32_RESERVED_LEN


@dataclass(frozen=True)
class CheckProblem:
    path: str
    offset: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.path} @ {self.offset}: {self.message}"


@dataclass
class CheckReport:
    problems: list[CheckProblem] = field(default_factory=list)
    records: int = 0
    units: int = 0
    lmq_queues: int = 0          # %LMQ% queues seen (checked against INNER_MULTI_DISPATCH)
    expired_units: int = 0       # units below the commit-log min offset (not compared)
    undispatched: int = 0        # records at the commit log's tail not dispatched yet (a note)
    ext_units: int = 0           # units holding a ConsumeQueueExt address (tags code not compared)
    notes: list[str] = field(default_factory=list)   # what was seen that is not a problem

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, path: object, offset: int | None, message: str) -> None:
        self.problems.append(CheckProblem(str(path), offset, message))


def _java_split(text: str) -> list[str]:
    """``String.split(",")``: trailing empty strings removed."""
    parts = text.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _multi_dispatch(rec: codec.MessageRecord) -> list[tuple[str, int]] | str | None:
    """(queue name, queue offset) pairs the record was also dispatched to
    (``DefaultMessageStore.checkMultiDispatchQueue`` / ``ConsumeQueue.multiDispatchLmqQueue``); None
    when it is not a multi-dispatch record; a message when its properties do not parse."""
    queues = rec.properties.get(PROPERTY_INNER_MULTI_DISPATCH, "")
    offsets = rec.properties.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET, "")
    if not queues.strip() or not offsets.strip():   # StringUtils.isBlank
        return None
    names, values = _java_split(queues), _java_split(offsets)
    if len(names) != len(values):
        return (f"{PROPERTY_INNER_MULTI_DISPATCH} names {len(names)} queues but "
                f"{PROPERTY_INNER_MULTI_QUEUE_OFFSET} {len(values)} offsets")
    try:
        return [(name, int(value)) for name, value in zip(names, values, strict=True)]
    except ValueError:
        return f"{PROPERTY_INNER_MULTI_QUEUE_OFFSET} {offsets!r} is not a list of numbers"


def _crc_problem(mm: mmap.mmap, pos: int, rec: codec.MessageRecord) -> str | None:
    """BODYCRC (``codec.body_crc_problem``, the rule recovery uses), then ``__CRC32#`` when the record
    carries one."""
    problem = codec.body_crc_problem(rec.body, rec.body_crc)
    if problem is not None:
        return problem
    text = rec.properties.get(PROPERTY_CRC32)
    if text is None:
        return None
    expected = 0   # the decimal digits are stored least significant first; int arithmetic as Java's
    for ch in reversed(text):
        expected = (expected * 10 + ord(ch) - ord("0")) & 0xFFFFFFFF
    expected = expected - (1 << 32) if expected & 0x80000000 else expected
    if expected < 0 or rec.total_size < CRC32_RESERVED_LEN:
        return f"{PROPERTY_CRC32} property {text!r} is not a CRC"
    actual = codec.masked_crc32(bytes(mm[pos:pos + rec.total_size - CRC32_RESERVED_LEN]))
    if actual != expected:
        return f"{PROPERTY_CRC32} mismatch: stored {expected}, computed {actual} over the record"
    return None


def check_store(cl: CommitLog, queue_dirs: Iterable[tuple[str, int]],
                consume_queue: Callable[[str, int], ConsumeQueue | None],
                levels: Sequence[int] | Mapping[int, int]) -> CheckReport:
    """Every record's CRCs, and that the consume queues (``consume_queue(topic, queue_id)`` for each of
    ``queue_dirs`` and each queue a record names) and the commit log agree; ``levels``: the delay levels
    that give a delayed message's tags code."""
    report = CheckReport()
    expected: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}
    queue_dirs = set(queue_dirs)
    missing_targets: Counter[str] = Counter()
    cl.min_offset()   # readers: re-list the files
    last = cl.queue.last
    # A reader's max_offset stops before damage; check must look past it, to the unwritten tail.
    end = cl.max_offset() if not cl.read_only else (last.end_offset if last else 0)
    offset = cl_min = cl.min_offset()
    while offset < end:
        try:
            # check_crc=False: the CRCs are verified below, record by record, so that a bad CRC is
            # reported without losing the rest of the file
            for at, rec in cl.iter_records(offset, check_crc=False):
                if at >= end:
                    break
                if rec is None:
                    continue
                report.records += 1
                mf = cl.find_file(at)
                if mf is None:   # the file iter_records just read went away (retention by a writer)
                    raise StoreError(f"no commit-log file covers offset {at}", path=cl.directory, offset=at)
                problem = _crc_problem(mf.mm, at - mf.file_from_offset, rec)
                if problem:
                    report.add(mf.path, at, problem)
                if not is_dispatchable(rec.sys_flag):
                    continue
                try:
                    code = tags_code_of(rec.topic, rec.properties, rec.store_timestamp, levels)
                except CorruptStoreError as exc:
                    report.add(mf.path, at, str(exc))
                    continue
                expected.setdefault((rec.topic, rec.queue_id), {})[rec.queue_offset] = (at, rec.total_size, code)
                targets = _multi_dispatch(rec)
                if isinstance(targets, str):
                    report.add(mf.path, at, targets)
                    continue
                for name, qoff in targets or ():
                    # an LMQ queue is queue 0 when enableLmq is on, else the record's queue id
                    qid = rec.queue_id
                    if name.startswith(LMQ_PREFIX) and ((name, 0) in queue_dirs or (name, qid) not in queue_dirs):
                        qid = 0
                    if (name, qid) not in queue_dirs:
                        missing_targets[name] += 1
                        continue
                    expected.setdefault((name, qid), {})[qoff] = (at, rec.total_size, code)
            break
        except CorruptStoreError as exc:
            report.add(exc.path, exc.offset, str(exc))
            bad = exc.offset if exc.offset is not None else offset
            offset = bad - bad % cl.file_size + cl.file_size   # resume at the next file
    keys = set(expected) | queue_dirs
    # Records past their queue's dispatched end.  ReputMessageService dispatches the commit log in
    # order, so a broker stopped before it caught up leaves a *tail* of records without units, and
    # recovery dispatches them forward (spec §2.9): that is a note.  Anywhere else it is a problem.
    undispatched: list[tuple[int, str]] = []
    last_dispatched = -1          # highest commit-log offset a matching unit points at
    for topic, queue_id in sorted(keys):
        records = expected.get((topic, queue_id), {})
        cq = consume_queue(topic, queue_id)
        if cq is None:
            for qoff, (phys, _, _) in sorted(records.items()):
                undispatched.append((phys, f"record {topic}/{queue_id}#{qoff} has no consume queue"))
            continue
        if topic.startswith(LMQ_PREFIX):
            report.lmq_queues += 1
        lo, hi = cq.min_offset(), cq.max_offset()
        try:
            units = cq.raw_units(lo, hi)
        except CorruptStoreError as exc:
            report.add(exc.path, exc.offset, str(exc))
            continue
        report.units += len(units)
        for i, (phys, size, code) in enumerate(units.tolist()):
            qoff = lo + i
            want = records.pop(qoff, None)
            if want is None and 0 <= phys < cl_min:
                report.expired_units += 1   # its record was deleted by retention
                continue
            if want is not None and want[0] == phys:
                last_dispatched = max(last_dispatched, phys)
            if want is not None and codec.is_ext_address(code) and want[:2] == (phys, size):
                report.ext_units += 1
                continue
            if want != (phys, size, code):
                where = cq.queue.find(qoff * UNIT)
                report.add(where.path if where else cq.directory, qoff * UNIT,
                           f"unit {topic}/{queue_id}#{qoff} is (offset {phys}, size {size}, tagsCode {code}) but "
                           + ("no record has this queue offset" if want is None else
                              f"the record is (offset {want[0]}, size {want[1]}, tagsCode {want[2]})"))
        for qoff, (phys, _, _) in sorted(records.items()):
            if qoff >= lo:
                undispatched.append((phys, f"record {topic}/{queue_id}#{qoff} has no consume-queue unit"))
    if undispatched and min(phys for phys, _ in undispatched) > last_dispatched:
        start = min(phys for phys, _ in undispatched)
        report.undispatched = len(undispatched)
        report.notes.append(
            f"{len(undispatched)} records at the end of the commit log (from offset {start}) have no "
            "consume-queue unit yet: the broker stopped before dispatching them; recovery dispatches them")
    else:
        for phys, message in undispatched:
            report.add(cl.directory, phys, message)
    _describe(report, missing_targets)
    return report


def _describe(report: CheckReport, missing_targets: Counter[str]) -> None:
    if report.lmq_queues:
        report.notes.append(
            f"{report.lmq_queues} LMQ queues ({LMQ_PREFIX}...) seen: their units point at records of other "
            f"topics and were checked against each record's {PROPERTY_INNER_MULTI_DISPATCH} / "
            f"{PROPERTY_INNER_MULTI_QUEUE_OFFSET}; rocketstream does not write LMQ units")
    if missing_targets:
        names = ", ".join(sorted(missing_targets)[:5]) + (" ..." if len(missing_targets) > 5 else "")
        report.notes.append(
            f"{sum(missing_targets.values())} multi-dispatch entries name queues that have no directory "
            f"({names}); LMQ queues may have been deleted")
    if report.ext_units:
        report.notes.append(
            f"{report.ext_units} consume-queue units hold ConsumeQueueExt addresses (enableConsumeQueueExt): "
            "offset and size checked, tags codes live in consumequeue_ext/ and were not compared")
    if report.expired_units:
        report.notes.append(
            f"{report.expired_units} consume-queue units point below the commit-log min offset: expired by "
            "retention, not compared")
