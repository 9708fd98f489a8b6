"""``MessageStore.check()``: every record's CRC, and commit log <-> consume queue agreement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rocketstream.errors import CorruptStoreError
from rocketstream.store.consume_queue import UNIT
from rocketstream.store.dispatch import is_dispatchable, tags_code_of

if TYPE_CHECKING:
    from rocketstream.store.message_store import MessageStore


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

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, path: object, offset: int | None, message: str) -> None:
        self.problems.append(CheckProblem(str(path), offset, message))


def check_store(store: MessageStore) -> CheckReport:
    report = CheckReport()
    cl = store.commit_log
    expected: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}
    cl.min_offset()   # readers: re-list the files
    last = cl.queue.last
    # A reader's max_offset stops before damage; check must look past it, to the unwritten tail.
    end = cl.max_offset() if not cl.read_only else (last.end_offset if last else 0)
    offset = cl.min_offset()
    levels = store.config.delay_levels_ms
    while offset < end:
        try:
            for at, rec in cl.iter_records(offset, check_crc=True):
                if at >= end:
                    break
                if rec is None:
                    continue
                report.records += 1
                if is_dispatchable(rec.sys_flag):
                    code = tags_code_of(rec.topic, rec.properties, rec.store_timestamp, levels)
                    expected.setdefault((rec.topic, rec.queue_id), {})[rec.queue_offset] = (
                        at, rec.total_size, code)
            break
        except CorruptStoreError as exc:
            report.add(exc.path, exc.offset, str(exc))
            bad = exc.offset if exc.offset is not None else offset
            offset = bad - bad % cl.file_size + cl.file_size   # resume at the next file
    keys = set(expected) | set(store._queue_dirs())
    for topic, queue_id in sorted(keys):
        records = expected.get((topic, queue_id), {})
        cq = store._queue(topic, queue_id)
        if cq is None:
            for qoff, (phys, _, _) in sorted(records.items()):
                report.add(cl.directory, phys, f"record {topic}/{queue_id}#{qoff} has no consume queue")
            continue
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
            if want != (phys, size, code):
                where = cq.queue.find(qoff * UNIT)
                report.add(where.path if where else cq.directory, qoff * UNIT,
                           f"unit {topic}/{queue_id}#{qoff} is (offset {phys}, size {size}, tagsCode {code}) but "
                           + ("no record has this queue offset" if want is None else
                              f"the record is (offset {want[0]}, size {want[1]}, tagsCode {want[2]})"))
        for qoff, (phys, _, _) in sorted(records.items()):
            if qoff >= lo:
                report.add(cl.directory, phys, f"record {topic}/{queue_id}#{qoff} has no consume-queue unit")
    return report
