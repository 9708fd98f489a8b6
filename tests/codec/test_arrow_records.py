"""codec/arrow_records.py: the row schema, the one header layout, and pull bodies to Arrow.

The pull-body decoder (:class:`PullBodyDecoder`, network mode's) must give, row for row, what the
per-record decoder ``codec.decode_record`` gives for the records of a body that fall in the asked queue
range (and tag set), and refuse a body the per-record decoder refuses with a BodyError naming the byte
where the bad record starts. Bodies are built here by ``codec.encode_record``; no sockets, no Spark.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstream import codec
from rocketstream.codec import (
    FLAG_COMPRESSED,
    HEADER_V4,
    HEADER_V4_DTYPE,
    HEADER_V4_FIELDS,
    MAGIC_V1,
    MAGIC_V2,
    HostAddress,
    compress_body,
    decode_record,
    encode_record,
)
from rocketstream.codec import arrow_records as ar
from rocketstream.codec.arrow_records import (
    ALONE_BYTES,
    BATCH_BYTES,
    FIELD_NAMES,
    MESSAGE_SCHEMA,
    PullBodyDecoder,
    pack_pull_bodies,
    project_schema,
    record_starts,
    spark_ddl,
)
from rocketstream.errors import BodyError, CorruptStoreError

ADDR = "10.0.0.9:10911"
BASE = 1 << 40   # commit-log offset of a body's first record: rows carry the PHYSICALOFFSET field, not the position


# --- schema ----------------------------------------------------------------------------------
def test_message_schema_is_exactly_the_contract() -> None:
    s, i32, i64, ts = pa.string(), pa.int32(), pa.int64(), pa.timestamp("us", tz="UTC")
    expected = pa.schema([
        pa.field("topic", s, False), pa.field("brokerName", s, False), pa.field("queueId", i32, False),
        pa.field("queueOffset", i64, False), pa.field("commitLogOffset", i64, False),
        pa.field("storeSize", i32, False), pa.field("msgId", s, False), pa.field("offsetMsgId", s, False),
        pa.field("tags", s, True), pa.field("keys", s, True), pa.field("body", pa.binary(), False),
        pa.field("properties", pa.map_(pa.string(), pa.string()), False),
        pa.field("bornTimestamp", ts, False), pa.field("bornHost", s, False),
        pa.field("storeTimestamp", ts, False), pa.field("storeHost", s, False), pa.field("sysFlag", i32, False),
        pa.field("bodyCRC", i32, False), pa.field("reconsumeTimes", i32, False), pa.field("flag", i32, False),
        pa.field("preparedTransactionOffset", i64, False),
    ])
    assert MESSAGE_SCHEMA.equals(expected)
    props = MESSAGE_SCHEMA.field("properties").type
    assert not props.key_field.nullable and props.item_field.nullable


def test_spark_ddl_marks_non_null_fields_and_follows_projection() -> None:
    ddl = spark_ddl()
    assert ddl.startswith("`topic` STRING NOT NULL, `brokerName` STRING NOT NULL, `queueId` INT NOT NULL")
    assert "`tags` STRING, `keys` STRING, `body` BINARY NOT NULL, `properties` MAP<STRING, STRING> NOT NULL" in ddl
    assert "`bornTimestamp` TIMESTAMP NOT NULL" in ddl
    assert spark_ddl(project_schema(["body", "topic"])) == "`body` BINARY NOT NULL, `topic` STRING NOT NULL"


def test_project_schema_rejects_unknown_and_repeated_columns() -> None:
    with pytest.raises(ValueError, match="unknown message column 'bodyy'.*valid columns: topic"):
        project_schema(["bodyy"])
    with pytest.raises(ValueError, match="twice"):
        project_schema(["body", "body"])


# --- the one header layout -------------------------------------------------------------------
# (field, position) as record.py's table draws the record with two IPv4 hosts (spec/rocketmq-store-format.md)
DRAWN = [("total_size", 0), ("magic", 4), ("body_crc", 8), ("queue_id", 12), ("flag", 16), ("queue_offset", 20),
         ("physical_offset", 28), ("sys_flag", 36), ("born_timestamp", 40), ("born_ip", 48), ("born_port", 52),
         ("store_timestamp", 56), ("store_ip", 64), ("store_port", 68), ("reconsume_times", 72),
         ("prepared_transaction_offset", 76), ("body_len", 84)]


def test_struct_and_dtype_are_one_layout_at_the_drawn_positions() -> None:
    assert [name for name, _ in HEADER_V4_FIELDS] == [name for name, _ in DRAWN]
    assert HEADER_V4.size == HEADER_V4_DTYPE.itemsize == 88
    assert [(name, HEADER_V4_DTYPE.fields[name][1]) for name in HEADER_V4_DTYPE.names] == DRAWN
    for name, pos in DRAWN:   # the struct's field k starts where the dtype's does
        k = [n for n, _ in HEADER_V4_FIELDS].index(name)
        assert struct.calcsize(">" + "".join(code for _, code in HEADER_V4_FIELDS[:k])) == pos
    assert (codec.POS_TOTAL_SIZE, codec.POS_MAGIC, codec.POS_SYS_FLAG, codec.POS_BORN_HOST,
            codec.POS_STORE_TIMESTAMP) == (0, 4, 36, 48, 56)
    assert codec.RECORD_HEAD.format == HEADER_V4.format[:10] == ">iiiiiqqiq"


def test_struct_and_dtype_read_the_values_a_record_was_written_with() -> None:
    raw = encode_record(topic="T", queue_id=3, body=b"hello", properties={"A": "b"}, flag=-7, queue_offset=11,
                        physical_offset=BASE, sys_flag=0, born_timestamp=1_700_000_000_001,
                        born_host=("10.1.2.3", 54321), store_timestamp=1_700_000_000_002,
                        store_host=("127.0.0.1", 10911), reconsume_times=2, prepared_transaction_offset=99)
    rec = decode_record(raw)
    assert rec is not None
    by_struct = dict(zip((n for n, _ in HEADER_V4_FIELDS), HEADER_V4.unpack_from(raw), strict=True))
    by_dtype = np.frombuffer(raw[:88], dtype=HEADER_V4_DTYPE)[0]
    assert by_struct == {name: int(by_dtype[name]) for name in HEADER_V4_DTYPE.names}
    assert by_struct["born_ip"] == 0x0A010203 and by_struct["store_port"] == 10911
    assert (by_struct["total_size"], by_struct["queue_offset"], by_struct["physical_offset"], by_struct["flag"],
            by_struct["store_timestamp"], by_struct["body_len"]) == (len(raw), 11, BASE, -7, rec.store_timestamp, 5)
    assert codec.INT64.unpack_from(raw, codec.POS_STORE_TIMESTAMP)[0] == 1_700_000_000_002


# --- record starts in a pull body (moved here with record_starts from spark/network_view.py) ------------
def test_record_starts_of_a_pull_body_and_bad_bodies() -> None:
    rec = bytearray(100)
    struct.pack_into(">ii", rec, 0, 100, MAGIC_V2)
    body = bytes(rec) * 3
    assert record_starts(body).tolist() == [0, 100, 200] and record_starts(b"").tolist() == []
    assert record_starts(memoryview(body)).tolist() == [0, 100, 200]
    for bad, what in ((body[:-1], "byte 200 has size 100 beyond the body"), (body + b"\0\0", "byte 300 is truncated"),
                      (body[:100] + struct.pack(">i", 5) + body[104:], "byte 100 has size 5"),
                      (body[:104] + struct.pack(">i", 1) + body[108:], "byte 100 has magic code 0x1")):
        with pytest.raises(BodyError, match=what + r".*\[peer 1\.2\.3\.4:5\]"):
            record_starts(bad, "1.2.3.4:5")


def _walk_starts(body: bytes) -> list[int] | None:
    """The plain walk record_starts must agree with: each start from the previous TOTALSIZE."""
    out, pos = [], 0
    while pos + 4 <= len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        if size <= 8:
            break
        out.append(pos)
        pos += size
    return out if pos == len(body) else None


def _blank_records(sizes: list[int]) -> bytes:
    out = bytearray()
    for size in sizes:
        rec = bytearray(size)
        struct.pack_into(">ii", rec, 0, size, MAGIC_V1)
        out += rec
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(st.integers(9, 80), st.one_of(st.integers(1, 40), st.integers(60, 300))), min_size=0,
                     max_size=12),
       damage=st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.integers(-3, 200))))
def test_record_starts_agrees_with_the_plain_walk_or_refuses_the_body(runs, damage) -> None:
    """Runs of records of one size (short ones, and ones long enough for record_starts' gathers) mixed with
    sizes that change every record; a size field damaged anywhere makes both the plain walk and
    record_starts refuse the body (or agree on it)."""
    sizes = [size for size, count in runs for _ in range(count)]
    sizes += [9 + (i * 7) % 50 for i in range(len(sizes) // 3)]   # a varying tail
    body = bytearray(_blank_records(sizes))
    if damage is not None and len(body) >= 4:
        struct.pack_into(">i", body, min(damage[0] % len(body), len(body) - 4), damage[1])
    expected = _walk_starts(bytes(body))
    magic_ok = expected is not None and all(
        p + 8 <= len(body) and struct.unpack_from(">i", body, p + 4)[0] in (MAGIC_V1, MAGIC_V2) for p in expected)
    if not magic_ok:
        with pytest.raises(BodyError, match="pull body: record at byte"):
            record_starts(bytes(body))
    else:
        assert record_starts(bytes(body)).tolist() == expected


def test_record_starts_of_many_records() -> None:
    body = _blank_records([300] * 5000 + [301] + [300] * 7)
    assert record_starts(body).tolist() == [300 * i for i in range(5001)] + [300 * 5001 + 1 + 300 * i
                                                                             for i in range(7)]


def test_pull_bodies_are_packed_into_decode_units_in_order() -> None:
    assert BATCH_BYTES == 7 << 19 and ALONE_BYTES == BATCH_BYTES // 2
    small, big = b"s" * 1000, b"B" * ALONE_BYTES
    bodies = [small, small, big, small, b"x" * (BATCH_BYTES - 500), small]
    units = list(pack_pull_bodies(bodies))
    assert b"".join(units) == b"".join(bodies)
    assert units[0] == small * 2 and units[1] is big and units[2] == small and len(units) == 5
    assert all(len(u) <= BATCH_BYTES or u is big for u in units)
    assert list(pack_pull_bodies([])) == [] and list(pack_pull_bodies([small])) == [small]


# --- pull bodies -> rows ------------------------------------------------------------------------
def _record(topic: str, queue_id: int, queue_offset: int, physical_offset: int, *, body: bytes = b"body",
            properties: dict[str, str] | bytes | None = None, born: tuple[str, int] = ("10.1.2.3", 54321),
            store: tuple[str, int] = ("127.0.0.1", 10911), compress: bool = False, sys_flag: int = 0,
            magic: int | None = None, **more: int) -> bytes:
    if compress and body:
        body, bits = compress_body(body)
        sys_flag |= bits
    fields = dict(flag=0, born_timestamp=1_700_000_000_000 + queue_offset, store_timestamp=1_700_000_000_500,
                  reconsume_times=0, prepared_transaction_offset=0)
    fields.update(more)
    return encode_record(topic=topic, queue_id=queue_id, body=body,
                         properties={"UNIQ_KEY": f"{queue_offset:032X}"} if properties is None else properties,
                         queue_offset=queue_offset, physical_offset=physical_offset, sys_flag=sys_flag,
                         born_host=born, store_host=store, magic=magic, **fields)


def _body(records: list[dict], topic: str = "T") -> bytes:
    out, pos = [], BASE
    for r in records:
        raw = _record(topic, physical_offset=pos, **r)
        out.append(raw)
        pos += len(raw)
    return b"".join(out)


def _micros(ms: int) -> int:
    """ms * 1000 as int64 arithmetic gives it (the column is micros; a damaged field may overflow)."""
    return (ms * 1000 + 2**63) % 2**64 - 2**63


def expected_rows(body: bytes, topic: str, queue_id: int, start: int, end: int, *, broker: str = "broker-a",
                  tags: set[str] | None = None, columns: list[str] | None = None) -> list[dict]:
    """The per-record decoder's rows (timestamps in micros): records of the queue in [start, end), with a TAGS in
    ``tags``. CorruptStoreError when it refuses a record (None for a BLANK one is refused too: a pull body holds
    messages only)."""
    starts = _walk_starts(body)
    if starts is None:
        raise CorruptStoreError("the body does not split into records")
    rows = []
    for pos in starts:
        rec = decode_record(body, pos, check_crc=False)
        if rec is None:
            raise CorruptStoreError("a BLANK record in a pull body", offset=pos)
        if rec.queue_id != queue_id or not start <= rec.queue_offset < end or (tags and rec.tags not in tags):
            continue
        row = {
            "topic": topic, "brokerName": broker, "queueId": queue_id, "queueOffset": rec.queue_offset,
            "commitLogOffset": rec.physical_offset, "storeSize": rec.total_size, "msgId": rec.msg_id,
            "offsetMsgId": rec.offset_msg_id, "tags": rec.tags, "keys": rec.keys, "body": rec.uncompressed_body(),
            "properties": rec.properties, "bornTimestamp": _micros(rec.born_timestamp),
            "bornHost": str(rec.born_host), "storeTimestamp": _micros(rec.store_timestamp),
            "storeHost": str(rec.store_host), "sysFlag": rec.sys_flag, "bodyCRC": rec.body_crc,
            "reconsumeTimes": rec.reconsume_times, "flag": rec.flag,
            "preparedTransactionOffset": rec.prepared_transaction_offset,
        }
        rows.append({c: row[c] for c in (columns or FIELD_NAMES)})
    return rows


def decoded_rows(batch: pa.RecordBatch) -> list[dict]:
    """``batch`` as row dicts, timestamps as int64 micros and property maps as dicts."""
    arrays = [a.cast(pa.int64()) if pa.types.is_timestamp(a.type) else a for a in batch.columns]
    rows = pa.RecordBatch.from_arrays(arrays, names=batch.schema.names).to_pylist()
    for row in rows:
        if "properties" in row:
            row["properties"] = dict(row["properties"])
    return rows


def decode(body: bytes | memoryview, queue_id: int = 0, start: int = 0, end: int = 2**62, *, topic: str = "T",
           columns: list[str] | None = None, tags: set[str] | None = None, check_crc: bool = False) -> pa.RecordBatch:
    decoder = PullBodyDecoder(project_schema(columns), "broker-a", tags, check_crc, ADDR)
    batch = decoder.decode(body, topic, queue_id, start, end)
    assert batch.schema == project_schema(columns)
    return batch


_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=10)
_hosts = st.one_of(st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
                   st.tuples(st.ip_addresses(v=6).map(str), st.integers(0, 65535)))
_props = st.one_of(
    st.fixed_dictionaries({"UNIQ_KEY": st.text("0123456789ABCDEF", min_size=32, max_size=32)},
                          optional={"TAGS": st.sampled_from(["a", "b", "ccc"]), "KEYS": _text, "x": _text}),
    st.dictionaries(_text, _text, max_size=4),
    st.binary(max_size=40))   # anything a broker may have stored
_records = st.lists(st.fixed_dictionaries({
    "queue_id": st.sampled_from([0, 0, 0, 1]),
    "queue_offset": st.integers(0, 40),
    "body": st.binary(max_size=200),
    "properties": _props,
    "born": _hosts,
    "store": _hosts,
    "compress": st.booleans(),
    "sys_flag": st.sampled_from([0, 0x4, 0x8]),
    "flag": st.integers(-(2**31), 2**31 - 1),
    "reconsume_times": st.integers(0, 16),
    "magic": st.sampled_from([None, MAGIC_V2]),   # None: V1 unless the topic needs V2's 2-byte length
}), min_size=1, max_size=20)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, topic=st.one_of(st.just("TopicA"), st.text(min_size=1, max_size=140).filter(
           lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t))),
       bounds=st.tuples(st.integers(0, 40), st.integers(0, 45)),
       columns=st.one_of(st.none(), st.permutations(FIELD_NAMES).flatmap(lambda p: st.integers(1, len(p)).map(
           lambda k: list(p[:k])))),
       tags=st.one_of(st.none(), st.sets(st.sampled_from(["a", "b", "zz"]), max_size=2)))
def test_rows_are_the_per_record_decoders_rows_of_the_range(records, topic, bounds, columns, tags) -> None:
    body = _body(records, topic)
    start, end = bounds
    want = expected_rows(body, topic, 0, start, end, tags=tags, columns=columns)
    got = decoded_rows(decode(body, 0, start, end, topic=topic, columns=columns, tags=tags))
    assert got == want


def test_rows_of_another_queue_and_past_the_range_are_dropped() -> None:
    body = _body([{"queue_id": q, "queue_offset": o} for o in range(10) for q in (0, 1)])
    assert decode(body, 1, 3, 7, columns=["queueId", "queueOffset"]).to_pylist() == [
        {"queueId": 1, "queueOffset": o} for o in range(3, 7)]
    assert decode(body, 2, columns=["queueOffset"]).num_rows == 0


def test_the_tag_filter_checks_the_tags_string() -> None:
    tags_of = ["a", "b", None, "ab", "a"]
    body = _body([{"queue_id": 0, "queue_offset": i,
                   "properties": {"UNIQ_KEY": f"{i:032X}", **({"TAGS": t} if t else {})}}
                  for i, t in enumerate(tags_of)])
    assert decode(body, columns=["queueOffset"], tags={"a"}).column(0).to_pylist() == [0, 4]
    assert decode(body, columns=["queueOffset"], tags={"a", "b"}).column(0).to_pylist() == [0, 1, 4]
    assert decode(body, columns=["queueOffset"], tags=set()).column(0).to_pylist() == [0, 1, 2, 3, 4]


def test_bool_values_unpacks_every_slice_with_null_as_false() -> None:
    mask = pa.array([True, None, False, True, True, None, True, False, True, True] * 2, pa.bool_())
    for offset in range(len(mask)):
        for length in range(len(mask) - offset + 1):
            part = mask.slice(offset, length)
            got = ar.bool_values(part)
            assert got.dtype == np.bool_ and got.tolist() == [bool(v) for v in part.to_pylist()], (offset, length)


def test_string_array_is_the_strings_utf8() -> None:
    values = ["TopicTest", "", "t\u00e9st-\u4e2d", "%RETRY%g"]
    got = ar.string_array(values)
    assert got.type == pa.string() and got.null_count == 0 and got.to_pylist() == values
    assert ar.string_array([]).to_pylist() == []


def test_properties_text_reads_as_java_decodes_utf8() -> None:
    """ASCII properties become strings without a copy; other valid UTF-8 reads as is; bytes that are not
    UTF-8 read with U+FFFD (Java's new String(bytes, UTF_8)); a slice is judged by its own rows."""
    ascii_rows = [b"TAGS\x01a\x02", b"KEYS\x01k1 k2\x02", b""]
    raw = pa.array(ascii_rows, pa.binary())
    got = ar.properties_text(raw)
    assert got.type == pa.string() and got.to_pylist() == [r.decode() for r in ascii_rows]
    assert got.buffers()[2].address == raw.buffers()[2].address   # a view, not a copy
    utf8 = ["TAGS\x01t\u00e9st\x02", "KEYS\x01\u4e2d\x02"]
    assert ar.properties_text(pa.array([u.encode() for u in utf8], pa.binary())).to_pylist() == utf8
    mixed = pa.array([b"TAGS\x01ok\x02", b"TAGS\x01\xff\xfe\x02", "K\x01\u00e9".encode()], pa.binary())
    assert ar.properties_text(mixed).to_pylist() == ["TAGS\x01ok\x02", "TAGS\x01\ufffd\ufffd\x02", "K\x01\u00e9"]
    assert ar.properties_text(mixed.slice(0, 1)).to_pylist() == ["TAGS\x01ok\x02"]
    assert ar.properties_text(mixed.slice(1, 1)).to_pylist() == ["TAGS\x01\ufffd\ufffd\x02"]
    assert ar.properties_text(pa.array([], pa.binary())).to_pylist() == []


def test_bodies_from_a_receive_buffer_decode_alike() -> None:
    body = _body([{"queue_id": 0, "queue_offset": i, "compress": i % 2 == 0, "body": b"xyz" * i}
                  for i in range(8)])
    in_buffer = memoryview(np.frombuffer(body, dtype=np.uint8).copy())
    assert decoded_rows(decode(in_buffer)) == decoded_rows(decode(body)) == expected_rows(body, "T", 0, 0, 2**62)


def test_an_empty_body_is_an_empty_batch_of_the_schema() -> None:
    assert decode(b"", columns=["body", "topic"]).num_rows == 0


@pytest.mark.parametrize("tags", [None, {"b"}])
def test_a_body_with_no_row_to_keep_is_an_empty_batch(tags: set[str] | None) -> None:
    """All rows past the range end (a broker's tag scan ran ahead) or of other tags: every column, offset message
    ids included, of no rows (network_view's _Decoder raised IndexError building offsetMsgId)."""
    body = _body([{"queue_id": 0, "queue_offset": i, "properties": {"TAGS": "a"}} for i in range(5, 8)])
    end = 5 if tags is None else 8
    assert decode(body, 0, 0, end, tags=tags).num_rows == 0


def _three() -> tuple[bytearray, list[int]]:
    records = [{"queue_id": 0, "queue_offset": i, "properties": {"TAGS": "a"}} for i in range(3)]
    body = bytearray(_body(records))
    return body, _walk_starts(bytes(body)) or []


@pytest.mark.parametrize("field, value, reason", [
    ("body_len", 10_000, "BODY length does not fit in TOTALSIZE"),
    ("born_port", 70_000, "port out of range"),
    ("store_port", -1, "port out of range"),
])
def test_a_bad_record_is_a_body_error_naming_its_byte(field: str, value: int, reason: str) -> None:
    body, starts = _three()
    struct.pack_into(">i", body, starts[1] + HEADER_V4_DTYPE.fields[field][1], value)
    with pytest.raises(BodyError, match=rf"pull body of T:0: record at byte {starts[1]} does not decode: "
                                        rf"{reason}.*\[peer {ADDR}\]"):
        decode(bytes(body))


def test_a_bad_magic_code_is_a_body_error_naming_its_byte() -> None:
    body, starts = _three()
    struct.pack_into(">i", body, starts[2] + 4, codec.BLANK_MAGIC)
    with pytest.raises(BodyError, match=f"record at byte {starts[2]} has magic code 0xcbd43194"):
        decode(bytes(body))


def test_a_compressed_body_that_does_not_inflate_is_a_body_error() -> None:
    good = _record("T", 0, 0, BASE)
    bad = _record("T", 0, 1, BASE + len(good), body=b"not zlib", sys_flag=FLAG_COMPRESSED)
    with pytest.raises(BodyError, match=rf"pull body of T:0: .*offset {BASE + len(good)}.*\[peer {ADDR}\]"):
        decode(good + bad)
    assert decode(good + bad, end=1, columns=["queueOffset", "body"]).to_pylist() == [
        {"queueOffset": 0, "body": b"body"}]   # only rows kept are inflated


def test_body_crc_is_checked_only_when_asked() -> None:
    body, starts = _three()
    body_pos = starts[1] + 88
    body[body_pos] ^= 0xFF
    assert decode(bytes(body), columns=["body"]).column(0).to_pylist()[1] == bytes([ord("b") ^ 0xFF]) + b"ody"
    with pytest.raises(CorruptStoreError, match=f"BODYCRC mismatch in a pull body from {ADDR}: T:0 offset 1") as info:
        decode(bytes(body), check_crc=True)
    assert str(BASE + starts[1]) in str(info.value)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, at=st.integers(0, 10_000), value=st.integers(-(2**31), 2**31 - 1),
       width=st.sampled_from([1, 2, 4]))
def test_damaged_bodies_decode_as_the_per_record_decoder_decodes_them_or_fail(records, at, value, width) -> None:
    """A field overwritten anywhere: the decoder gives the per-record decoder's rows, or a BodyError where the
    per-record decoder refuses a record (or the body does not split into records)."""
    body = bytearray(_body(records))
    at %= len(body) - width + 1
    body[at:at + width] = (value % 2 ** (8 * width)).to_bytes(width, "big")
    body = bytes(body)
    try:
        want = expected_rows(body, "T", 0, 0, 2**62)
    except CorruptStoreError:
        with pytest.raises(BodyError):
            decode(body)
        return
    assert decoded_rows(decode(body)) == want


def test_host_column_values() -> None:
    body = _body([{"queue_id": 0, "queue_offset": 0, "born": ("fe80::1:2", 40000), "store": ("10.0.0.1", 10911)},
                  {"queue_id": 0, "queue_offset": 1}])
    rows = decode(body, columns=["bornHost", "storeHost", "offsetMsgId"]).to_pylist()
    assert [r["bornHost"] for r in rows] == [str(HostAddress("fe80::1:2", 40000)), "10.1.2.3:54321"]
    assert rows[0]["storeHost"] == "10.0.0.1:10911"
    assert rows[0]["offsetMsgId"] == codec.offset_msg_id(HostAddress("10.0.0.1", 10911), BASE)




# --- variable-length pieces ---------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(size=st.integers(1, 300), seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12),
       shape=st.sampled_from(["stride", "ascending", "any", "variable"]))
def test_gather_segments_gives_the_slices(size: int, seed: int, n: int, shape: str) -> None:
    """Segments of one width (a constant stride, ascending with gaps, any order, overlapping) take the
    fixed-width gather, others Arrow's take; all give exactly the slices."""
    rng = np.random.default_rng(seed)
    data = rng.bytes(size)
    width = int(rng.integers(0, len(data) + 1))
    if shape == "stride":
        stride = int(rng.integers(1, 40))
        n = min(n, (len(data) - width) // stride + 1)
        starts = int(rng.integers(0, len(data) - width - stride * (n - 1) + 1)) + stride * np.arange(n)
        lengths = np.full(n, width)
    elif shape == "variable":
        starts = rng.integers(0, len(data), n)
        lengths = rng.integers(0, len(data) - starts + 1)
    else:
        starts = rng.integers(0, len(data) - width + 1, n)
        if shape == "ascending":
            starts = np.sort(starts)
        lengths = np.full(n, width)
    want = [data[s:s + k] for s, k in zip(starts.tolist(), lengths.tolist(), strict=True)]
    for type_ in (pa.binary(), pa.string()):
        got = ar.gather_segments(np.frombuffer(data, np.uint8), starts, lengths, type_)
        got.validate(full=type_ == pa.binary())
        assert got.type == type_
        assert [bytes(v.as_buffer()) for v in got] == want


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(st.fixed_dictionaries({"queue_id": st.sampled_from([0, 0, 1]),
                                                "queue_offset": st.integers(0, 40),
                                                "compress": st.booleans()}), min_size=1, max_size=20),
       body_size=st.integers(0, 300), seed=st.integers(0, 255))
def test_bodies_of_one_size_are_the_per_record_decoders_bodies(records, body_size, seed) -> None:
    """One producer's bodies are all the same size: records back to back at a constant stride, or with rows
    of another queue between them (the fixed-width gather either way)."""
    for i, r in enumerate(records):
        r["body"] = bytes((seed + i + k) % 256 for k in range(body_size))
    body = _body(records)
    want = expected_rows(body, "T", 0, 0, 2**62, columns=["body", "queueOffset"])
    assert decoded_rows(decode(body, columns=["body", "queueOffset"])) == want
