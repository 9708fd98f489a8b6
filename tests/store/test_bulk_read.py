"""The vectorized read path gives, field for field, what the per-record decoder gives.

Records are laid into in-memory "commit-log files" (numpy buffers) by ``format.encode_record``, with
the RocketMQ end-of-file rule (a record needs 8 spare bytes, else a BLANK record closes the file), and
every batch from ``read_range_batches`` is compared with ``format.decode_record`` of the same bytes.
"""

from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstream import codec
from rocketstream.codec import CQ_DTYPE, HostAddress, decode_record, encode_record
from rocketstream.codec import arrow_records as ar
from rocketstream.codec.arrow_records import project_schema
from rocketstream.errors import CorruptStoreError
from rocketstream.store.read.bulk_read import RangeUnits, batch_bounds, read_range_batches, read_ranges_batches

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
V4_BORN = HostAddress("10.1.2.3", 54321)
V4_STORE = HostAddress("127.0.0.1", 10911)
V6_BORN = HostAddress("fe80::1:2", 40000)
V6_STORE = HostAddress("2001:db8::7", 10911)


@dataclass
class FakeCommitLog:
    """Commit-log files as numpy buffers, appended to the RocketMQ way (BLANK record at a file's end)."""

    file_size: int = 4096
    files: list[np.ndarray] = field(default_factory=list)
    write_pos: int = 0  # virtual offset of the next record
    units: dict[tuple[str, int], list[tuple[int, int, int]]] = field(default_factory=dict)

    def buffer_for(self, offset: int) -> tuple[int, np.ndarray]:
        index = offset // self.file_size
        if not 0 <= index < len(self.files):
            raise AssertionError(f"no file for offset {offset}")
        return index * self.file_size, self.files[index]

    def path_for(self, file_from: int) -> str:
        return f"/fake/commitlog/{file_from:020d}"

    def append(self, *, topic: str, queue_id: int, body: bytes = b"body", properties: object = None,
               born_host: HostAddress = V4_BORN, store_host: HostAddress = V4_STORE, sys_flag: int = 0,
               flag: int = 0, reconsume_times: int = 0, prepared_transaction_offset: int = 0,
               born_timestamp: int = 1_700_000_000_000, store_timestamp: int = 1_700_000_000_500) -> int:
        """Append one record; returns its physical offset and records its CQ unit."""
        queue = self.units.setdefault((topic, queue_id), [])
        props = {} if properties is None else properties
        fields = dict(topic=topic, queue_id=queue_id, body=body, properties=props, flag=flag,
                      queue_offset=len(queue), sys_flag=sys_flag, born_timestamp=born_timestamp,
                      born_host=born_host, store_timestamp=store_timestamp, store_host=store_host,
                      reconsume_times=reconsume_times, prepared_transaction_offset=prepared_transaction_offset)
        size = len(encode_record(physical_offset=0, **fields))
        assert size + 8 <= self.file_size, "test record larger than a file"
        if not self.files or self.write_pos % self.file_size + size + 8 > self.file_size \
                or self.write_pos // self.file_size >= len(self.files):
            if self.files and self.write_pos // self.file_size < len(self.files):
                rel = self.write_pos % self.file_size
                self.files[-1][rel:rel + 8] = np.frombuffer(codec.encode_blank(self.file_size - rel), np.uint8)
                self.write_pos += self.file_size - rel
            self.files.append(np.zeros(self.file_size, dtype=np.uint8))
        offset = self.write_pos
        raw = encode_record(physical_offset=offset, **fields)
        rel = offset % self.file_size
        self.files[-1][rel:rel + size] = np.frombuffer(raw, np.uint8)
        self.write_pos += size
        if isinstance(props, dict):
            tags = props.get("TAGS")
        else:
            tags = codec.decode_properties(props).get("TAGS")
        queue.append((offset, size, codec.tags_code(tags)))
        return offset

    def cq(self, topic: str, queue_id: int) -> np.ndarray:
        return np.array(self.units.get((topic, queue_id), []), dtype=CQ_DTYPE)

    def poke(self, offset: int, raw: bytes) -> None:
        rel = offset % self.file_size
        self.files[offset // self.file_size][rel:rel + len(raw)] = np.frombuffer(raw, np.uint8)


def expected_rows(log: FakeCommitLog, topic: str, queue_id: int, broker: str = "broker-a",
                  start: int = 0) -> list[dict]:
    rows = []
    for qoff, (offset, size, _) in enumerate(log.units[(topic, queue_id)]):
        if qoff < start:
            continue
        file_from, buf = log.buffer_for(offset)
        rec = decode_record(buf, offset - file_from, base_offset=file_from)
        assert rec is not None and rec.total_size == size
        rows.append({
            "topic": topic, "brokerName": broker, "queueId": queue_id, "queueOffset": qoff,
            "commitLogOffset": offset, "storeSize": size, "msgId": rec.msg_id, "offsetMsgId": rec.offset_msg_id,
            "tags": rec.tags, "keys": rec.keys, "body": rec.uncompressed_body(), "properties": rec.properties,
            "bornTimestamp": EPOCH + dt.timedelta(milliseconds=rec.born_timestamp), "bornHost": str(rec.born_host),
            "storeTimestamp": EPOCH + dt.timedelta(milliseconds=rec.store_timestamp),
            "storeHost": str(rec.store_host), "sysFlag": rec.sys_flag, "bodyCRC": rec.body_crc,
            "reconsumeTimes": rec.reconsume_times, "flag": rec.flag,
            "preparedTransactionOffset": rec.prepared_transaction_offset,
        })
    return rows


def read_rows(log: FakeCommitLog, topic: str, queue_id: int, *, start: int = 0, **kwargs: object) -> list[dict]:
    units = log.cq(topic, queue_id)[start:]
    batches = list(read_range_batches(log, units, start, topic=topic, queue_id=queue_id,
                                      broker_name=kwargs.pop("broker_name", "broker-a"), **kwargs))
    columns = kwargs.get("columns")
    for batch in batches:
        assert batch.schema == project_schema(columns)  # type: ignore[arg-type]
        assert batch.num_rows > 0
    rows = [row for batch in batches for row in batch.to_pylist()]
    for row in rows:
        if "properties" in row:
            row["properties"] = dict(row["properties"])
    return rows


def mixed_log() -> FakeCommitLog:
    """Two topics, interleaved queues, IPv4/IPv6 hosts, compressed bodies, V2 topic, several files."""
    log = FakeCommitLog(file_size=4096)
    long_topic = "L" * 130  # > 127 chars: V2 magic
    for i in range(60):
        born = V6_BORN if i % 5 == 1 else V4_BORN
        store = V6_STORE if i % 7 == 2 else V4_STORE
        props = {"UNIQ_KEY": f"{i:032X}", "WAIT": "true"}
        if i % 3:
            props["TAGS"] = f"Tag{i % 3}"
        if i % 4 == 0:
            props["KEYS"] = f"k{i} k{i + 1}"
        if i % 6 == 5:
            del props["UNIQ_KEY"]
        body = bytes([i % 251]) * (i * 7 % 300)
        sys_flag = codec.TRANSACTION_COMMIT if i % 11 == 3 else 0
        if i % 8 == 7:
            body = b"compressible " * 40
            stored, bits = codec.compress_body(body, compression=(codec.COMPRESSION_ZLIB, codec.COMPRESSION_LZ4,
                                                                 codec.COMPRESSION_ZSTD)[i % 3])
            body, sys_flag = stored, sys_flag | bits
        log.append(topic="TopicA", queue_id=i % 2, body=body, properties=props, born_host=born, store_host=store,
                   sys_flag=sys_flag, flag=i, reconsume_times=i % 4, prepared_transaction_offset=i * 1000,
                   born_timestamp=1_700_000_000_000 + i, store_timestamp=1_700_000_001_000 + i)
        if i % 4 == 0:
            log.append(topic=long_topic, queue_id=0, body=b"v2", properties={"TAGS": "Tag1"}, store_host=store)
    return log


# --- rows equal the per-record decoder -------------------------------------------------------
def test_rows_match_per_record_decode_across_files_hosts_and_compression() -> None:
    log = mixed_log()
    assert len(log.files) > 3
    for topic, queue_id in log.units:
        assert read_rows(log, topic, queue_id) == expected_rows(log, topic, queue_id)


def test_all_ipv4_and_mixed_header_paths_agree_with_decode_record() -> None:
    log = mixed_log()
    file_from, buf = log.buffer_for(0)
    offsets = [o for units in log.units.values() for o, _, _ in units if o < log.file_size]
    rel = np.array(sorted(offsets), dtype=np.int64)
    h = ar.decode_headers(buf, rel)
    assert h["born_v6"].any() and (~h["store_v6"]).any()
    for i, pos in enumerate(rel.tolist()):
        rec = decode_record(buf, pos)
        assert (h["total_size"][i], h["magic"][i], h["sys_flag"][i], h["store_timestamp"][i],
                h["reconsume_times"][i], h["prepared_transaction_offset"][i], h["body_len"][i]) == (
            rec.total_size, rec.magic, rec.sys_flag, rec.store_timestamp, rec.reconsume_times,
            rec.prepared_transaction_offset, len(rec.body))
        assert bytes(buf[h["body_pos"][i]:h["body_pos"][i] + h["body_len"][i]]) == rec.body
        assert bytes(buf[h["topic_pos"][i]:h["topic_pos"][i] + h["topic_len"][i]]).decode() == rec.topic
    v4_only = rel[~(h["born_v6"] | h["store_v6"])]
    h4 = ar.decode_headers(buf, v4_only)
    sel = ~(h["born_v6"] | h["store_v6"])
    for name in ("body_pos", "props_pos", "props_len", "store_timestamp", "physical_offset", "store_port"):
        assert np.array_equal(h4[name], h[name][sel]), name
    assert not ar.any_problem(ar.record_problems(buf, h, rel, base_offset=file_from, check_crc=True, check_ports=True,
                                                 expected_sizes=h["total_size"])).any()


message_strategy = st.fixed_dictionaries({
    "body": st.binary(max_size=200),
    "compress": st.sampled_from([None, codec.COMPRESSION_ZLIB, codec.COMPRESSION_LZ4, codec.COMPRESSION_ZSTD]),
    "born_v6": st.booleans(),
    "store_v6": st.booleans(),
    # raw properties, so empty names/values, missing separators and duplicates all occur
    "props": st.lists(st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "", "ü"]),
                                st.text(alphabet="xyé\x01 ", max_size=4), st.booleans()), max_size=6),
    "topic": st.sampled_from(["T", "TopicB"]),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(message_strategy, min_size=1, max_size=25), st.integers(300, 4096))
def test_random_records_match_per_record_decode(messages: list[dict], batch_bytes: int) -> None:
    log = FakeCommitLog(file_size=2048)
    for m in messages:
        raw_props = "".join(f"{k}\x01{v}" + ("\x02" if end else "") for k, v, end in m["props"]).encode()
        raw_props = raw_props.replace(b"\x02\x02", b"\x02")
        body, sys_flag = m["body"], 0
        if m["compress"] is not None:
            body, sys_flag = codec.compress_body(body, compression=m["compress"])
        log.append(topic=m["topic"], queue_id=0, body=body, properties=raw_props,
                   born_host=V6_BORN if m["born_v6"] else V4_BORN, store_host=V6_STORE if m["store_v6"] else V4_STORE,
                   sys_flag=sys_flag)
    for topic, queue_id in log.units:
        assert read_rows(log, topic, queue_id, batch_bytes=batch_bytes) == expected_rows(log, topic, queue_id)


def test_duplicate_property_names_later_value_wins() -> None:
    log = FakeCommitLog()
    log.append(topic="T", queue_id=0, properties=b"WAIT\x01true\x02TAGS\x01A\x02WAIT\x01false\x02CLUSTER\x01c\x02"
               b"TAGS\x01B\x02")
    log.append(topic="T", queue_id=0, properties=b"KEYS\x01k\x02")
    rows = read_rows(log, "T", 0)
    assert rows[0]["properties"] == {"WAIT": "false", "TAGS": "B", "CLUSTER": "c"}
    assert rows[0]["tags"] == "B" and rows[1]["properties"] == {"KEYS": "k"}
    assert rows == expected_rows(log, "T", 0)


def test_msg_id_is_uniq_key_else_offset_msg_id() -> None:
    log = FakeCommitLog()
    log.append(topic="T", queue_id=0, properties={"UNIQ_KEY": "ABC"})
    off = log.append(topic="T", queue_id=0, properties={"TAGS": "x"})
    log.append(topic="T", queue_id=0, properties={}, store_host=V6_STORE)
    rows = read_rows(log, "T", 0, columns=["msgId", "offsetMsgId"])
    assert rows[0]["msgId"] == "ABC"
    assert rows[1]["msgId"] == rows[1]["offsetMsgId"] == codec.offset_msg_id(V4_STORE, off)
    assert len(rows[2]["msgId"]) == 56 and rows[2]["msgId"].startswith("20010DB8")


def test_hosts_and_offset_ids_with_several_ipv4_addresses() -> None:
    log = FakeCommitLog(file_size=1 << 16)
    for i in range(30):
        log.append(topic="T", queue_id=0, properties={"TAGS": "t"},
                   born_host=HostAddress(f"10.0.0.{i % 4}", 1000 + i % 3),
                   store_host=HostAddress(f"192.168.1.{i % 2}", 10911 + i % 2))
    rows = read_rows(log, "T", 0)
    assert rows == expected_rows(log, "T", 0)
    assert {r["storeHost"] for r in rows} == {"192.168.1.0:10911", "192.168.1.1:10912"}
    assert len({r["bornHost"] for r in rows}) == 12


def test_queue_offsets_start_where_the_units_start() -> None:
    log = mixed_log()
    rows = read_rows(log, "TopicA", 0, start=7)
    assert rows == expected_rows(log, "TopicA", 0, start=7)
    assert rows[0]["queueOffset"] == 7


def test_records_of_another_topic_length_still_decode() -> None:
    # The reader guesses TOPIC length from the queue's topic; a record with another topic (LMQ-style
    # multi-dispatch) must still decode, with the queue's topic in the topic column.
    log = mixed_log()
    rows = read_rows(log, "TopicA", 0, broker_name="b")
    units = log.cq("TopicA", 0)
    batches = read_range_batches(log, units, 0, topic="Q", queue_id=0, broker_name="b")
    got = [r for batch in batches for r in batch.to_pylist()]
    assert [r["topic"] for r in got] == ["Q"] * len(rows)
    assert [r["body"] for r in got] == [r["body"] for r in rows]
    assert [dict(r["properties"]) for r in got] == [r["properties"] for r in rows]


def test_no_units_yield_no_batches() -> None:
    log = FakeCommitLog()
    assert list(read_range_batches(log, np.zeros(0, CQ_DTYPE), 0, topic="T", queue_id=0, broker_name="b")) == []


# --- tag filtering ---------------------------------------------------------------------------
def test_tag_filter_uses_tags_code_then_rechecks_the_string() -> None:
    assert codec.java_hash("Aa") == codec.java_hash("BB")  # a real collision
    log = FakeCommitLog()
    for i, tag in enumerate(["Aa", "BB", None, "C", "Aa", "BB"]):
        log.append(topic="T", queue_id=0, body=b"m%d" % i, properties={"TAGS": tag} if tag else {})
    rows = read_rows(log, "T", 0, tags={"Aa", "C"})
    assert [(r["queueOffset"], r["tags"]) for r in rows] == [(0, "Aa"), (3, "C"), (4, "Aa")]
    assert rows == [r for r in expected_rows(log, "T", 0) if r["tags"] in {"Aa", "C"}]


def test_tag_filter_never_reads_records_with_other_tags_codes() -> None:
    log = FakeCommitLog()
    log.append(topic="T", queue_id=0, properties={"TAGS": "keep"})
    bad = log.append(topic="T", queue_id=0, properties={"TAGS": "skip"})
    log.poke(bad + 4, b"\x00\x00\x00\x00")  # destroy the magic of the record nobody asked for
    assert [r["tags"] for r in read_rows(log, "T", 0, tags=["keep"])] == ["keep"]
    with pytest.raises(CorruptStoreError):
        read_rows(log, "T", 0)


def test_tag_filter_that_matches_nothing_yields_nothing_and_empty_means_all() -> None:
    log = mixed_log()
    assert read_rows(log, "TopicA", 0, tags={"NoSuchTag"}) == []
    assert read_rows(log, "TopicA", 0, tags=set()) == expected_rows(log, "TopicA", 0)


# --- column subsets --------------------------------------------------------------------------
@pytest.mark.parametrize("columns", [
    ["body"], ["queueOffset", "topic"], ["tags", "keys", "msgId"], ["properties", "storeHost", "bornHost"],
    ["commitLogOffset", "storeSize"], ["bornTimestamp", "storeTimestamp", "sysFlag"],
])
def test_column_subsets_in_requested_order(columns: list[str]) -> None:
    log = mixed_log()
    rows = read_rows(log, "TopicA", 1, columns=columns)
    assert rows == [{c: r[c] for c in columns} for r in expected_rows(log, "TopicA", 1)]


def test_bodies_are_not_read_when_not_requested() -> None:
    log = FakeCommitLog()
    off = log.append(topic="T", queue_id=0, body=b"x" * 50, properties={"TAGS": "a"})
    log.poke(off + 88, b"\xff" * 50)  # body bytes changed: CRC would fail, compressed flag unset
    rows = read_rows(log, "T", 0, columns=["tags", "queueOffset"], check_crc=False)
    assert rows == [{"tags": "a", "queueOffset": 0}]


# --- batch sizes -----------------------------------------------------------------------------
@pytest.mark.parametrize("batch_bytes", [1, 500, 2000, 1 << 20])
def test_batches_respect_the_byte_budget(batch_bytes: int) -> None:
    log = mixed_log()
    units = log.cq("TopicA", 0)
    batches = list(read_range_batches(log, units, 0, topic="TopicA", queue_id=0, broker_name="broker-a",
                                      batch_bytes=batch_bytes))
    for b in batches:
        stored = sum(b.column("storeSize").to_pylist())
        assert stored <= batch_bytes or b.num_rows == 1
    assert sum(b.num_rows for b in batches) == len(units)
    if batch_bytes == 1 << 20:
        assert len(batches) == 1  # crossing commit-log files does not split a batch


def test_batch_bounds_greedy() -> None:
    assert batch_bounds(np.array([5, 5, 5, 20, 1]), 10) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert batch_bounds(np.array([], dtype=np.int64), 10) == []


# --- corruption ------------------------------------------------------------------------------
def corrupt_case(change: str) -> tuple[FakeCommitLog, np.ndarray, int]:
    log = FakeCommitLog()
    for i in range(5):
        log.append(topic="T", queue_id=0, body=b"b%d" % i, properties={"TAGS": "t"})
    units = log.cq("T", 0)
    victim = int(units[3]["offset"])
    if change == "magic":
        log.poke(victim + 4, b"\x12\x34\x56\x78")
    elif change == "unit size":
        units[3]["size"] += 1
    elif change == "unit offset":
        units[3]["offset"] = int(units[2]["offset"]) + 1
        victim = int(units[3]["offset"])
    elif change == "physical offset field":
        log.poke(victim + 28, struct.pack(">q", victim + 8))
    elif change == "properties length":
        rec = decode_record(log.files[0], victim)
        log.poke(victim + rec.total_size - len(codec.encode_properties(rec.properties)) - 2, b"\x00\x01")
    elif change == "body length":
        log.poke(victim + 84, struct.pack(">i", 100_000))
    elif change == "port":
        log.poke(victim + 52, struct.pack(">i", 70000))
    elif change == "beyond file":
        units[3]["offset"] = log.file_size - 20
        victim = log.file_size - 20
    return log, units, victim


@pytest.mark.parametrize("change, reason", [
    ("magic", "bad MAGICCODE"), ("unit size", "TOTALSIZE differs"), ("unit offset", "PHYSICALOFFSET"),
    ("physical offset field", "PHYSICALOFFSET"), ("properties length", "length formula"),
    ("body length", "length formula"), ("port", "port out of range"), ("beyond file", "MAGICCODE|past the end"),
])
def test_corrupt_header_raises_naming_file_and_offset(change: str, reason: str) -> None:
    log, units, victim = corrupt_case(change)
    with pytest.raises(CorruptStoreError, match=reason) as info:
        list(read_range_batches(log, units, 0, topic="T", queue_id=0, broker_name="b", columns=["queueOffset"]))
    assert info.value.path == "/fake/commitlog/00000000000000000000"
    assert info.value.offset == victim


def test_mismatching_unit_is_read_again_once_before_it_is_an_error() -> None:
    """A unit torn while a live writer wrote it reads whole the second time: the batch is read with the
    fresh units. A mismatch that persists is a CorruptStoreError naming the commit-log file and offset."""
    log, units, victim = corrupt_case("unit size")
    good = log.cq("T", 0)
    asked = []

    def reread(start: int, end: int) -> np.ndarray:
        asked.append((start, end))
        return good[start:end]

    batches = list(read_range_batches(log, units, 0, topic="T", queue_id=0, broker_name="b",
                                      columns=["queueOffset", "storeSize"], reread=reread))
    table = pa.Table.from_batches(batches)
    assert table.column("queueOffset").to_pylist() == list(range(len(good)))
    assert table.column("storeSize").to_pylist() == good["size"].tolist()
    assert asked == [(0, len(good))]

    asked.clear()
    with pytest.raises(CorruptStoreError, match="TOTALSIZE differs") as info:
        list(read_range_batches(log, units, 0, topic="T", queue_id=0, broker_name="b", columns=["queueOffset"],
                                reread=lambda a, b: (asked.append((a, b)), units[a:b])[1]))
    assert info.value.path == "/fake/commitlog/00000000000000000000" and info.value.offset == victim
    assert "consume-queue unit 3 of T/0" in str(info.value) and len(asked) == 1


def test_reread_under_a_tag_filter_keeps_only_fresh_units_that_match() -> None:
    log = FakeCommitLog()
    for i in range(6):
        log.append(topic="T", queue_id=0, body=b"b%d" % i, properties={"TAGS": "a" if i % 2 else "b"})
    good = log.cq("T", 0)
    torn = good.copy()
    torn[1]["size"] += 1                      # a matching unit torn: read again
    torn[2]["tags_code"] = codec.tags_code("a")  # a unit that looked like "a" but is "b" when read again
    torn[2]["size"] += 1
    batches = list(read_range_batches(log, torn, 0, topic="T", queue_id=0, broker_name="b",
                                      columns=["queueOffset", "tags"], tags={"a"}, reread=lambda a, b: good[a:b]))
    table = pa.Table.from_batches(batches)
    assert table.column("queueOffset").to_pylist() == [1, 3, 5]
    assert table.column("tags").to_pylist() == ["a", "a", "a"]


def test_several_ranges_read_at_once_equal_the_ranges_read_one_by_one() -> None:
    """A Spark task's ranges (two topics, interleaved queues, several files, a V2 topic) read in one call:
    rows in range order, each with its own topic, queueId and queue offsets, batches crossing the range
    boundaries (one batch for many small ranges), and the same rows with a tag filter."""
    log = mixed_log()
    long_topic = "L" * 130
    asks = [("TopicA", 1, 3), (long_topic, 0, 0), ("TopicA", 0, 10), ("TopicA", 1, 0)]
    ranges = [RangeUnits(t, q, s, log.cq(t, q)[s:]) for t, q, s in asks]
    for tags in (None, {"Tag1"}):
        want = [r for t, q, s in asks for r in read_rows(log, t, q, start=s, tags=tags)]
        batches = list(read_ranges_batches(log, ranges, broker_name="broker-a", tags=tags))
        got = [row for b in batches for row in b.to_pylist()]
        for row in got:
            row["properties"] = dict(row["properties"])
        assert got == want and len(got) > 40
        assert len(batches) == 1   # 1 MiB of batch budget holds every range
    small = list(read_ranges_batches(log, ranges, broker_name="b", columns=["topic", "queueId", "queueOffset"],
                                     batch_bytes=600))
    assert len(small) > 10
    rows = [tuple(r.values()) for b in small for r in b.to_pylist()]
    assert rows == [(t, q, o) for t, q, s in asks for o in range(s, len(log.cq(t, q)))]
    assert list(read_ranges_batches(log, [], broker_name="b")) == []


def test_a_mismatch_in_one_of_several_ranges_rereads_that_range() -> None:
    log = FakeCommitLog()
    for i in range(8):
        log.append(topic="T", queue_id=i % 2, body=b"b%d" % i)
    good0, good1 = log.cq("T", 0), log.cq("T", 1)
    torn = good1.copy()
    torn[2]["size"] += 1
    asked = []

    def reread(start: int, end: int) -> np.ndarray:
        asked.append((start, end))
        return good1[start:end]

    ranges = [RangeUnits("T", 0, 0, good0, None), RangeUnits("T", 1, 1, torn[1:], reread)]
    table = pa.Table.from_batches(list(read_ranges_batches(log, ranges, broker_name="b",
                                                           columns=["queueId", "queueOffset", "storeSize"])))
    assert list(zip(*(table.column(c).to_pylist() for c in ("queueId", "queueOffset")), strict=True)) == [
        (0, 0), (0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]
    assert table.column("storeSize").to_pylist() == good0["size"].tolist() + good1["size"][1:].tolist()
    assert asked == [(1, 4)]
    # a range without reread: the mismatch is an error naming that range's queue
    ranges = [RangeUnits("T", 0, 0, good0, lambda a, b: good0[a:b]), RangeUnits("T", 1, 0, torn, None)]
    with pytest.raises(CorruptStoreError, match="consume-queue unit 2 of T/1"):
        list(read_ranges_batches(log, ranges, broker_name="b", columns=["queueOffset"]))


def test_crc_checked_only_when_asked() -> None:
    log = FakeCommitLog()
    log.append(topic="T", queue_id=0, body=b"hello")
    off = log.append(topic="T", queue_id=0, body=b"world")
    log.poke(off + 88, b"W")
    assert [r["body"] for r in read_rows(log, "T", 0, columns=["body"])] == [b"hello", b"World"]
    with pytest.raises(CorruptStoreError, match="BODYCRC") as info:
        read_rows(log, "T", 0, columns=["queueOffset"], check_crc=True)
    assert info.value.offset == off


def test_invalid_utf8_properties_read_with_replacement_characters() -> None:
    log = FakeCommitLog()
    log.append(topic="T", queue_id=0, properties={"TAGS": "ok"})
    log.append(topic="T", queue_id=0, properties=b"TAGS\x01\xff\xfe\x02")
    assert [r["tags"] for r in read_rows(log, "T", 0, columns=["tags"])] == ["ok", "\ufffd\ufffd"]


def test_undecompressable_body_raises() -> None:
    log = FakeCommitLog()
    off = log.append(topic="T", queue_id=0, body=b"not zlib at all", sys_flag=codec.FLAG_COMPRESSED)
    with pytest.raises(CorruptStoreError, match="decompress") as info:
        read_rows(log, "T", 0, columns=["body"])
    assert info.value.offset == off and info.value.path.endswith("00000000000000000000")


# --- building blocks -------------------------------------------------------------------------
def test_gather_segments_handles_unsorted_and_overlapping_ranges() -> None:
    buf = np.frombuffer(b"abcdefghijklmnop", np.uint8)
    cases = [([0, 4, 8], [2, 3, 0]), ([8, 0, 4], [2, 3, 1]), ([0, 1, 0], [5, 5, 16])]
    for starts, lengths in cases:
        got = ar.gather_segments(buf, np.array(starts), np.array(lengths)).to_pylist()
        assert got == [bytes(buf[s:s + n]) for s, n in zip(starts, lengths, strict=True)]


def test_parse_properties_matches_decode_properties() -> None:
    many = b"".join(b"name%d\x01v%d\x02" % (i % 40, i) for i in range(50))  # > 32 entries: hashed duplicates
    raws = [b"", b"a\x01b", b"\x01x\x02y\x01\x02k\x01v\x01w\x02", b"k\x01v\x02k\x01w\x02", "é\x01ü\x02".encode(),
            b"PREFIXED_A\x011\x02PREFIXED_B\x012\x02PREFIXED_A\x013\x02", b"\x02\x02\x01\x01", many,
            b"UNIQ_KEY\x01u\x02PREFIXED_B\x01z"]
    maps, cols = ar.parse_properties(pa.array(raws, pa.binary()).cast(pa.string()), ["k", "PREFIXED_B", "UNIQ_KEY"])
    assert [dict(m) for m in maps.to_pylist()] == [codec.decode_properties(r) for r in raws]
    assert [len(m) for m in maps.to_pylist()] == [len(codec.decode_properties(r)) for r in raws]  # no duplicates kept
    assert cols["k"].to_pylist() == [None, None, "v\x01w", "w", None, None, None, None, None]
    assert cols["PREFIXED_B"].to_pylist() == [None] * 5 + ["2", None, None, "z"]
    assert cols["UNIQ_KEY"].to_pylist() == [None] * 8 + ["u"]


def test_parse_properties_uniform_batches_match_decode_properties() -> None:
    """Batches where every record has the same names in the same order take a shortcut; records that
    differ anywhere (a name byte past the first 8, an empty value, a missing \\x02, a duplicate)
    must give exactly what the general rules give."""
    def rows(i: int) -> bytes:
        return (b"UNIQ_KEY\x01%032X\x02LONG_PROPERTY_NAME\x01v\x01%d\x02TAGS\x01T%d\x02K\x01%s\x02"
                % (i, i, i % 3, b"x" * (i % 5 + 1)))
    uniform = [rows(i) for i in range(40)]
    variants = {
        "uniform": uniform,
        "name differs past 8 bytes": uniform[:7] + [
            uniform[7].replace(b"NAME_X", b"NAME_Y").replace(b"LONG_PROPERTY_NAME", b"LONG_PROPERTY_NAMF")
        ] + uniform[8:],
        "empty value": uniform[:3] + [uniform[3].replace(b"TAGS\x01T0", b"TAGS\x01")] + uniform[4:],
        "unterminated": uniform[:-1] + [uniform[-1][:-1]],
        "duplicate": uniform[:5] + [uniform[5].replace(b"K\x01", b"TAGS\x01")] + uniform[6:],
        "short name": uniform[:9] + [uniform[9].replace(b"TAGS\x01", b"TAG\x01S")] + uniform[10:],
        "tiny first record": [b"a\x01b\x02"] * 3,
    }
    for label, raws in variants.items():
        arr = pa.array([b"pad\x01x\x02"] + raws, pa.binary()).cast(pa.string())[1:]  # non-zero array offset
        maps, cols = ar.parse_properties(arr, ["TAGS", "UNIQ_KEY", "KEYS", "LONG_PROPERTY_NAME"])
        maps.validate(full=True)
        expected = [codec.decode_properties(r) for r in raws]
        assert [dict(m) for m in maps.to_pylist()] == expected, label
        assert [len(m) for m in maps.to_pylist()] == [len(e) for e in expected], label
        for name, col in cols.items():
            col.validate(full=True)
            assert col.to_pylist() == [e.get(name) for e in expected], (label, name)
