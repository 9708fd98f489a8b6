"""Item 4 — damaged files: bytes flipped and files truncated at many positions in the commit log,
the consume queues, the checkpoint and consumerOffset.json (clean and crashed stores).

Each case copies a pristine store, damages it, then opens it as a writer (recovery) and reads every
queue back twice (``read_range`` with BODYCRC verification, and ``get_message``), then the offset
table. A case passes when it ends in one of:

* recovered: every row read is identical to the original message at that queue offset, and rows
  are missing only at a queue's tail (recovery truncated a damaged commit-log tail);
* typed error: a ``RocketStreamError`` whose text names the damaged store's file (and offset or
  character position);
* undetectable by the format: the flipped byte lies in a field no checksum covers (RocketMQ 4.9
  checksums the body only: flag, timestamps, hosts, sysFlag, topic, queue id/offset, properties,
  an offset-file digit), and the rows differ from the originals in exactly the columns that field
  feeds — counted separately, never mixed with other damage.

Anything else — an untyped exception, a hang (SIGALRM), a row that differs in any other way, a
missing row in the middle of a queue — is a failure.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reliutil import TOPIC, Figures, body, message, open_store
from rocketstream import codec
from rocketstream.errors import CorruptStoreError, OffsetFileError, RocketStreamError
from rocketstream.store import GetMessageStatus, MessageStore
from rocketstream.store.meta.offsets import (
    ConsumerOffsetManager,
    dump_consumer_offsets,
    load_consumer_offsets,
)

QUEUES = 3
CL = 16 * 1024
CQ = 20 * 48
CASE_TIMEOUT_S = 20

# V1 / IPv4 record layout: (field, start, length); BODY, TOPIC, PROPS follow at variable positions
HEADER = [("TOTALSIZE", 0, 4), ("MAGICCODE", 4, 4), ("BODYCRC", 8, 4), ("QUEUEID", 12, 4), ("FLAG", 16, 4),
          ("QUEUEOFFSET", 20, 8), ("PHYSICALOFFSET", 28, 8), ("SYSFLAG", 36, 4), ("BORNTIMESTAMP", 40, 8),
          ("BORNHOST", 48, 8), ("STORETIMESTAMP", 56, 8), ("STOREHOST", 64, 8), ("RECONSUMETIMES", 72, 4),
          ("PREPAREDTRANSACTIONOFFSET", 76, 8), ("BODYLENGTH", 84, 4)]
# columns (read_range names / MessageRecord attributes) a field with no checksum may change
UNPROTECTED = {
    "FLAG": {"flag"}, "BORNTIMESTAMP": {"bornTimestamp", "born_timestamp"},
    "BORNHOST": {"bornHost", "born_host"}, "STORETIMESTAMP": {"storeTimestamp", "store_timestamp"},
    "STOREHOST": {"storeHost", "offsetMsgId", "store_host"}, "RECONSUMETIMES": {"reconsumeTimes", "reconsume_times"},
    "PREPAREDTRANSACTIONOFFSET": {"preparedTransactionOffset", "prepared_transaction_offset"},
    "SYSFLAG": {"sysFlag", "sys_flag", "body"},   # the compressed bit decides how the body is decoded
    "QUEUEID": {"queue_id"}, "QUEUEOFFSET": {"queue_offset"}, "TOPIC": {"topic"},
    "PROPERTIES": {"properties", "tags", "keys", "msgId"},
    "TAGSCODE": set(),                             # CQ tagsCode: a filter hint, rows unaffected
}


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"no result within {CASE_TIMEOUT_S} s")


# ----------------------------------------------------------------------------- the pristine store
def build_pristine(root: Path) -> dict:
    """A clean store over many small files, and everything needed to judge a damaged copy."""
    rnd = random.Random(5)
    seq = [0] * QUEUES
    with open_store(root, mapped_file_size_commit_log=CL, mapped_file_size_consume_queue=CQ) as store:
        for _ in range(260):
            q = rnd.randrange(QUEUES)
            if rnd.random() < 0.25:
                k = rnd.randrange(2, 6)
                store.put_messages([message(q, seq[q] + j, tags=False) for j in range(k)], q)
            else:
                k = 1
                store.put_message(message(q, seq[q]), q)
            seq[q] += k
        offsets = store.offsets
        offsets.commit("g1", TOPIC, {q: 1 for q in range(QUEUES)})
        offsets.commit("g1", TOPIC, {q: seq[q] // 2 for q in range(QUEUES)})
        offsets.commit("g2", TOPIC, {0: 7})
        rows = {q: _rows(store, q) for q in range(QUEUES)}
        records = {q: _records(store, q) for q in range(QUEUES)}
        fields = _record_fields(store)
    return {"root": root, "rows": rows, "records": records, "fields": fields, "counts": seq,
            "offsets": ConsumerOffsetManager(root).table(),
            "offsets_bak": load_consumer_offsets((root / "config" / "consumerOffset.json.bak").read_bytes())}


def _rows(store: MessageStore, q: int) -> list[dict]:
    out = []
    for batch in store.read_range(TOPIC, q, store.min_offset(TOPIC, q), store.max_offset(TOPIC, q), check_crc=True):
        # timestamps compared as integers: a flipped high bit is a valid int64 but no Python datetime
        cols = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in batch.columns]
        out += pa.RecordBatch.from_arrays(cols, names=batch.schema.names).to_pylist()
    return out


def _records(store: MessageStore, q: int) -> list[dict]:
    out, offset = [], store.min_offset(TOPIC, q)
    while True:
        r = store.get_message("rel", TOPIC, q, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            return out
        out += [_record_dict(m) for m in r.messages]
        offset = r.next_begin_offset


def _record_dict(m) -> dict:
    d = {k: getattr(m, k) for k in ("total_size", "magic", "body_crc", "queue_id", "flag", "queue_offset",
                                    "physical_offset", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
                                    "store_host", "reconsume_times", "prepared_transaction_offset", "topic",
                                    "properties")}
    d["body"] = m.uncompressed_body()
    return d


def _record_fields(store: MessageStore) -> list[tuple[int, str, int, int]]:
    """(commit-log offset, field, start, length) of every field of every record."""
    out = []
    for offset, rec in store.commit_log.iter_records(0, check_crc=True):
        if rec is None:
            continue
        out += [(offset, name, offset + s, n) for name, s, n in HEADER]
        p = offset + 88
        n_body, n_topic = len(rec.body), len(rec.topic.encode())
        out += [(offset, "BODY", p, n_body), (offset, "TOPICLENGTH", p + n_body, 1),
                (offset, "TOPIC", p + n_body + 1, n_topic), (offset, "PROPERTIESLENGTH", p + n_body + 1 + n_topic, 2),
                (offset, "PROPERTIES", p + n_body + 3 + n_topic, rec.total_size - (88 + n_body + 3 + n_topic))]
    return out


# ----------------------------------------------------------------------------------- the damage
def flip(path: Path, position: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)[0]
        f.seek(position)
        f.write(bytes([b ^ mask]))


def truncate(path: Path, length: int) -> None:
    os.truncate(path, length)


def plan_cases(pristine: dict, rnd: random.Random, per_kind: int) -> list[tuple]:
    """(kind, relative path, position, mask-or-None, field, abnormal) tuples."""
    root = pristine["root"]
    cases = []
    fields = pristine["fields"]
    # commit log: a byte in a field of a record (all fields, many records), and random bytes anywhere
    for _offset, name, start, n in rnd.sample(fields, min(per_kind * 3, len(fields))):
        if n == 0:
            continue
        at = start + rnd.randrange(n)
        cases.append(("flip", f"commitlog/{at - at % CL:020d}", at % CL, 1 << rnd.randrange(8), name,
                      rnd.random() < 0.3))
    cl_files = sorted(os.listdir(root / "commitlog"))
    for _ in range(per_kind):
        name = rnd.choice(cl_files)
        at = rnd.randrange(CL)
        cases.append(("flip", f"commitlog/{name}", at, rnd.randrange(1, 256), _field_at(fields, int(name) + at),
                      rnd.random() < 0.3))
        cases.append(("truncate", f"commitlog/{name}", rnd.randrange(CL), None, None, False))
    # consume queues: a byte of a unit (offset / size / tagsCode), random bytes, truncation
    cq_files = [f"consumequeue/{TOPIC}/{q}/{n}" for q in range(QUEUES)
                for n in sorted(os.listdir(root / "consumequeue" / TOPIC / str(q)))]
    for _ in range(per_kind * 2):
        rel = rnd.choice(cq_files)
        used = _used_bytes(root / rel)
        pos = rnd.randrange(max(used, 20))
        field = ("UNITOFFSET", "UNITOFFSET", "UNITSIZE", "TAGSCODE")[min((pos % 20) // 4, 3)] if pos < used else None
        if pos % 20 >= 12:
            field = "TAGSCODE"
        cases.append(("flip", rel, pos, 1 << rnd.randrange(8), field, rnd.random() < 0.3))
    for _ in range(per_kind // 2 + 1):
        rel = rnd.choice(cq_files)
        cases.append(("truncate", rel, rnd.randrange(CQ), None, None, False))
        cases.append(("zero_tail", rel, 20 * rnd.randrange(max(_used_bytes(root / rel) // 20, 1)), None, None,
                      rnd.random() < 0.5))
    # checkpoint and the offset files
    for _ in range(per_kind // 2 + 1):
        cases.append(("flip", "checkpoint", rnd.randrange(32), rnd.randrange(1, 256), "CHECKPOINT", True))
        cases.append(("truncate", "checkpoint", rnd.randrange(4096), None, None, rnd.random() < 0.5))
        for rel in ("config/consumerOffset.json", "config/consumerOffset.json.bak"):
            size = (root / rel).stat().st_size
            cases.append(("flip", rel, rnd.randrange(size), 1 << rnd.randrange(8), "OFFSETFILE", False))
            cases.append(("truncate", rel, rnd.randrange(size), None, None, False))
    return cases


def _field_at(fields: list[tuple[int, str, int, int]], at: int) -> str | None:
    """The record field holding commit-log byte ``at`` (None: blank record or unwritten tail)."""
    return next((name for _, name, start, n in fields if start <= at < start + n), None)


def _used_bytes(path: Path) -> int:
    data = path.read_bytes()
    units = len(data) // 20
    for i in range(units):
        if data[i * 20 + 8:i * 20 + 12] == bytes(4):
            return i * 20
    return units * 20


# ----------------------------------------------------------------------------------- one case
def run_case(pristine: dict, work: Path, case: tuple) -> tuple[str, str]:
    """(outcome, detail); outcome in recovered / typed_error / undetectable / FAILURE."""
    kind, rel, pos, mask, field, abnormal = case
    root = work / pristine["root"].name     # same directory name: the broker name derives from it
    # GNU cp keeps the 420 MB index file sparse; shutil.copytree wrote it out in full for every case
    subprocess.run(["cp", "-a", "--sparse=always", str(pristine["root"]), str(root)], check=True)
    target = root / rel
    if kind == "flip":
        flip(target, pos, mask)
    elif kind == "truncate":
        truncate(target, pos)
    else:   # zero a consume-queue tail from a unit boundary on
        with open(target, "r+b") as f:
            f.seek(pos)
            f.write(bytes(CQ - pos))
    if abnormal:
        (root / "abort").touch()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_TIMEOUT_S)
    diffs: set[str] = set()
    try:
        try:
            with MessageStore.open(root) as store:
                for q in range(QUEUES):
                    diffs |= _compare(_rows(store, q), pristine["rows"][q], "row")
                    diffs |= _compare(_records(store, q), pristine["records"][q], "record")
                table = store.offsets.table()
            if table not in (pristine["offsets"], pristine["offsets_bak"]):
                diffs.add("offset table")
        except RocketStreamError as exc:
            return _judge_error(exc, root, diffs, field)
        except Hang as exc:
            return "FAILURE", f"hang: {exc}"
        except Exception as exc:  # noqa: BLE001 - untyped exceptions are what we look for
            return "FAILURE", f"untyped {type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        shutil.rmtree(root, ignore_errors=True)
    return _judge_rows(diffs, field)


def _compare(got: list[dict], want: list[dict], what: str) -> set[str]:
    """Columns that differ; 'missing-middle' / 'extra' when rows are not a prefix of the originals."""
    diffs = set()
    if len(got) > len(want):
        diffs.add(f"{what}: extra rows")
    for g, w in zip(got, want, strict=False):  # extra/missing rows reported above
        diffs |= {k for k in w if g.get(k) != w[k] and k != "brokerName"}   # brokerName is not on disk
    # rows may be missing only at the tail: prefix shape is implied by comparing position by position
    return diffs


def _judge_rows(diffs: set[str], field: str | None) -> tuple[str, str]:
    if not diffs:
        return "recovered", ""
    allowed = UNPROTECTED.get(field or "", None)
    if field == "OFFSETFILE" and diffs == {"offset table"}:
        return "undetectable", "offset file digit/name changed and still parses"
    if allowed is not None and diffs <= allowed:
        return "undetectable", f"{field} -> {sorted(diffs)}"
    return "FAILURE", f"silently wrong rows: columns {sorted(diffs)} differ (damaged field {field})"


def _judge_error(exc: RocketStreamError, root: Path, diffs: set[str], field: str | None) -> tuple[str, str]:
    if diffs and not (field in UNPROTECTED and diffs <= UNPROTECTED[field]):
        return "FAILURE", f"rows differed {sorted(diffs)} before the error {exc}"
    text = str(exc)
    if str(root) not in text:
        return "FAILURE", f"typed error does not name a file of the store: {type(exc).__name__}: {text}"
    located = getattr(exc, "offset", None) is not None or getattr(exc, "position", None) is not None
    if not located and "length" not in text:   # a wrong file length is about the whole file
        return "FAILURE", f"typed error names no offset: {type(exc).__name__}: {text}"
    return "typed_error", f"{type(exc).__name__}"


def campaign(base: Path, per_kind: int, seed: int = 1) -> Figures:
    figures = Figures("4 corruption")
    pristine = build_pristine(base / "pristine")
    cases = plan_cases(pristine, random.Random(seed), per_kind)
    outcomes: Counter = Counter()
    for i, case in enumerate(cases):
        work = base / f"case{i}"
        work.mkdir()
        outcome, detail = run_case(pristine, work, case)
        outcomes[outcome] += 1
        figures.trials += 1
        if outcome == "FAILURE":
            figures.fail(f"{case}: {detail}")
    figures.extra.update({k: v for k, v in outcomes.items() if k != "FAILURE"})
    return figures.report()


def test_corruption_short(tmp_path: Path) -> None:
    figures = campaign(tmp_path, per_kind=5)
    assert not figures.failures, figures.failures


@pytest.mark.slow
def test_corruption_campaign(tmp_path: Path) -> None:
    figures = campaign(tmp_path, per_kind=150, seed=31)
    assert not figures.failures, figures.failures


# ------------------------------------------------------------------------------- decoder fuzzing
def _valid_record(body_len: int, props: dict[str, str], topic: str) -> bytes:
    return codec.encode_record(topic=topic, queue_id=1, body=b"b" * body_len, properties=codec.encode_properties(props),
                             queue_offset=3, physical_offset=1000, sys_flag=0, born_timestamp=1, store_timestamp=2,
                             born_host=codec.HostAddress("10.0.0.1", 5), store_host=codec.HostAddress("10.0.0.2", 6))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 300), st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda s: "\x01" not in s
                                                                                   and "\x02" not in s),
                                            st.text(max_size=8).filter(lambda s: "\x01" not in s and "\x02" not in s),
                                            max_size=4),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
       st.one_of(st.none(), st.integers(0, 10_000)), st.booleans())
def test_fuzz_decode_record_mutated(body_len, props, flips, cut, check_crc) -> None:
    """A valid record with flipped bytes and/or a cut tail decodes or raises CorruptStoreError
    naming the offset — and when it decodes with CRC checking, the body is the original one."""
    raw = bytearray(_valid_record(body_len, props, "TopicF"))
    for at, mask in flips:
        raw[at % len(raw)] ^= mask
    if cut is not None:
        raw = raw[:cut % (len(raw) + 1)]
    try:
        rec = codec.decode_record(bytes(raw), 0, check_crc=check_crc, path="cl", base_offset=4096)
    except CorruptStoreError as exc:
        assert exc.offset == 4096 and exc.path == "cl"
        return
    if rec is not None and check_crc and body_len:
        assert rec.body == b"b" * body_len


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 50))
def test_fuzz_decode_record_random_bytes(data, pos) -> None:
    try:
        codec.decode_record(data, pos, check_crc=True)
    except CorruptStoreError:
        pass


OFFSET_DOC = dump_consumer_offsets({"T@g": {0: 250, 1: 248, 2: 7}, "%RETRY%g@g": {0: 0}},
                                   data_version={"counter": 3, "stateVersion": 0, "timestamp": 17})


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1, max_size=4),
       st.one_of(st.none(), st.integers(0, 400)), st.sampled_from(["flip", "insert", "delete"]))
def test_fuzz_offset_file_parser_mutated(edits, cut, how) -> None:
    """A mutated consumerOffset.json parses to a table or raises OffsetFileError with a position."""
    raw = bytearray(OFFSET_DOC.encode())
    for at, value in edits:
        at %= len(raw) + (how == "insert")
        if how == "flip":
            raw[at % len(raw)] ^= value or 1
        elif how == "insert":
            raw[at:at] = bytes([value])
        elif len(raw) > 1:
            del raw[at % len(raw)]
    if cut is not None:
        raw = raw[:cut]
    try:
        table = load_consumer_offsets(bytes(raw), path="co.json")
    except OffsetFileError as exc:
        assert exc.path == "co.json" and exc.position is not None
        return
    assert all(isinstance(k, str) and all(isinstance(q, int) and isinstance(o, int) for q, o in v.items())
               for k, v in table.items())


def test_offset_table_falls_back_to_bak_for_a_damaged_main_file(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path)
    m.commit("g", "T", {0: 1})
    m.commit("g", "T", {0: 2})
    text = m.path.read_bytes()
    m.path.write_bytes(text[: len(text) // 2])
    assert m.table() == {"T@g": {0: 1}}


def test_body_flip_outside_the_recovery_window_is_a_typed_error_for_crc_reads(tmp_path: Path) -> None:
    """Normal recovery scans the last three commit-log files; an older damaged body is caught by
    BODYCRC verification on read (read_range(check_crc=True), get_message)."""
    root = tmp_path / "s"
    with open_store(root, mapped_file_size_commit_log=CL, mapped_file_size_consume_queue=CQ) as store:
        for i in range(200):
            store.put_message(message(0, i), 0)
        first = store.look_message_by_offset(0)
    assert len(os.listdir(root / "commitlog")) > 4
    flip(root / "commitlog" / f"{0:020d}", 88 + len(first.body) // 2, 0x10)
    with MessageStore.open(root) as store:
        with pytest.raises(CorruptStoreError) as info:
            list(store.read_range(TOPIC, 0, 0, 10, check_crc=True))
        assert info.value.offset == 0 and "commitlog" in str(info.value)
        with pytest.raises(CorruptStoreError):
            store.get_message("g", TOPIC, 0, 0, 4)
    assert body(0, 0) == first.body


# ------------------------------------------------- regression: consume-queue tail after a clean stop
def _cq_damage_store(tmp_path: Path) -> tuple[Path, list[list[dict]]]:
    root = tmp_path / "s"
    with open_store(root, mapped_file_size_commit_log=CL, mapped_file_size_consume_queue=CQ) as store:
        for i in range(90):
            store.put_message(message(i % 2, i // 2), i % 2)
        rows = [_rows(store, q) for q in range(2)]
    return root, rows


def _last_cq_file(root: Path, q: int) -> Path:
    d = root / "consumequeue" / TOPIC / str(q)
    return d / sorted(os.listdir(d))[-1]


@pytest.mark.parametrize("damage", ["size", "offset", "zero_last_two", "garbage_after_end"])
def test_damaged_consume_queue_tail_after_clean_shutdown_is_rebuilt(tmp_path: Path, damage: str) -> None:
    """Found by the corruption campaign (and reported by the store author): normal recovery trusted
    the consume-queue tail. Units that disagree with the commit log, or units lost at the tail, are
    now rebuilt from the commit log on open."""
    root, rows = _cq_damage_store(tmp_path)
    path = _last_cq_file(root, 1)
    used = _used_bytes(path)
    last = used - 20
    if damage == "size":
        flip(path, last + 11, 0x04)
    elif damage == "offset":
        flip(path, last + 6, 0x01)
    elif damage == "zero_last_two":
        with open(path, "r+b") as f:
            f.seek(used - 40)
            f.write(bytes(40))
    else:   # a unit-shaped bit pattern right after the end
        with open(path, "r+b") as f:
            f.seek(used)
            f.write(struct.pack(">qiq", 100, 77, 0))
    with open_store(root, mapped_file_size_commit_log=CL, mapped_file_size_consume_queue=CQ) as store:
        assert store.check().ok, store.check().problems
        assert [_rows(store, q) for q in range(2)] == rows
        r = store.put_message(message(1, 45), 1)
        assert r.ok and r.queue_offset == 45
