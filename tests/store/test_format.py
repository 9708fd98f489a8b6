"""Record codec behaviour: a hand-assembled record, Java-computed vectors, round trips, and bad input."""

from __future__ import annotations

import ipaddress
import struct
import zlib

import lz4.frame
import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream import codec
from rocketstream.codec import (
    BLANK_MAGIC,
    CQ_DTYPE,
    MAGIC_V1,
    MAGIC_V2,
    HostAddress,
    MessageRecord,
    cq_tags_code,
    decode_batch_body,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    encode_batch_body,
    encode_blank,
    encode_cq_unit,
    encode_properties,
    encode_record,
    java_hash,
    masked_crc32,
    new_uniq_key,
    offset_msg_id,
    record_size,
    tags_code,
)
from rocketstream.errors import CorruptStoreError, OptionError

# MessageExtEncoder's bytes for topic T, body "hi", WAIT=true, born 127.0.0.1:54321, stored at 127.0.0.1:10911
WORKED_EXAMPLE = bytes.fromhex(
    "00 00 00 68 da a3 20 a7 58 93 2a ac 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 00 00 00 01 8b cf e5 68 00"
    "7f 00 00 01 00 00 d4 31 00 00 01 8b cf e5 68 64"
    "7f 00 00 01 00 00 2a 9f 00 00 00 00 00 00 00 00"
    "00 00 00 00 00 00 00 02 68 69 01 54 00 0a 57 41"
    "49 54 01 74 72 75 65 02"
)


def worked_example_fields(**overrides: object) -> dict:
    fields = dict(
        topic="T", queue_id=0, body=b"hi", properties={"WAIT": "true"}, flag=0, queue_offset=0,
        physical_offset=0, sys_flag=0, born_timestamp=1700000000000, born_host=HostAddress("127.0.0.1", 54321),
        store_timestamp=1700000000100, store_host=HostAddress("127.0.0.1", 10911),
    )
    fields.update(overrides)
    return fields


# --- spec vectors -----------------------------------------------------------------------------
def test_worked_example_encodes_byte_for_byte():
    assert encode_record(**worked_example_fields()) == WORKED_EXAMPLE


def test_worked_example_decodes_every_field():
    rec = decode_record(WORKED_EXAMPLE)
    assert rec == MessageRecord(
        total_size=104, magic=MAGIC_V1, body_crc=1486039724, queue_id=0, flag=0, queue_offset=0,
        physical_offset=0, sys_flag=0, born_timestamp=1700000000000, born_host=HostAddress("127.0.0.1", 54321),
        store_timestamp=1700000000100, store_host=HostAddress("127.0.0.1", 10911), reconsume_times=0,
        prepared_transaction_offset=0, body=b"hi", topic="T", properties={"WAIT": "true"},
    )
    assert rec.offset_msg_id == rec.msg_id == "7F00000100002A9F0000000000000000"
    assert rec.tags is None and rec.keys is None and rec.tags_code == 0
    assert str(rec.born_host) == "127.0.0.1:54321"


@pytest.mark.parametrize("text, expected", [("TagA", 2598919), ("TagB", 2598920), ("*", 42),
                                            ("TopicTest#KEY1", -1656969516), ("", 0)])
def test_java_hash_vectors(text, expected):
    assert java_hash(text) == expected


def test_java_hash_counts_utf16_code_units_and_wraps_signed():
    # "é" is one code unit 0xE9; U+1F600 is a surrogate pair 0xD83D 0xDE00.
    assert java_hash("é") == 0xE9
    assert java_hash("\U0001F600") == 31 * 0xD83D + 0xDE00
    long_text = "z" * 50
    h = 0
    for ch in long_text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    assert java_hash(long_text) == (h - 2**32 if h >= 2**31 else h)
    assert -(2**31) <= java_hash(long_text) < 2**31


def test_tags_code_is_zero_without_tags():
    assert tags_code(None) == 0 and tags_code("") == 0 and tags_code("TagA") == 2598919


@pytest.mark.parametrize("data, expected", [(b"hello", 907060870), (b"hi", 1486039724), (b"", 0)])
def test_masked_crc32_vectors(data, expected):
    assert masked_crc32(data) == expected


def test_masked_crc_clears_the_sign_bit():
    assert zlib.crc32(b"hello") == 0x3610A686
    assert all(masked_crc32(bytes([i])) < 2**31 for i in range(256))


@pytest.mark.parametrize("offset, expected", [(0, "7F00000100002A9F0000000000000000"),
                                              (1073741824, "7F00000100002A9F0000000040000000")])
def test_offset_msg_id_vectors(offset, expected):
    assert offset_msg_id(("127.0.0.1", 10911), offset) == expected
    assert decode_offset_msg_id(expected) == (("127.0.0.1", 10911), offset)


def test_offset_msg_id_ipv6_is_56_upper_hex_chars():
    mid = offset_msg_id(HostAddress("fe80::1", 10911), 2**40 + 5)
    assert len(mid) == 56 and mid == mid.upper()
    assert decode_offset_msg_id(mid.lower()) == (HostAddress("fe80::1", 10911), 2**40 + 5)


@pytest.mark.parametrize("bad", ["", "7F00", "XX" * 16, "7F00000100002A9F00000000000000000"])
def test_bad_offset_msg_id_names_the_option(bad):
    with pytest.raises(OptionError, match="msgId"):
        decode_offset_msg_id(bad)


def test_record_size_formula():
    assert record_size(2, 1, 10) == 104
    assert record_size(7, 3, 5) == 91 + 7 + 3 + 5
    assert record_size(0, 0, 0, born_v6=True, store_v6=True, v2=True) == 91 + 12 + 12 + 1


# --- hosts, magic versions --------------------------------------------------------------------
def test_ipv6_hosts_set_sysflag_bits_and_shift_fields():
    raw = encode_record(**worked_example_fields(born_host=HostAddress("::1", 1), store_host=("2001:db8::7", 10911)))
    assert len(raw) == 104 + 24
    rec = decode_record(raw)
    assert rec.sys_flag == codec.FLAG_BORNHOST_V6 | codec.FLAG_STOREHOST_V6
    assert rec.born_host == ("::1", 1) and str(rec.born_host) == "[::1]:1"
    assert struct.unpack_from(">q", raw, 48 + 20)[0] == 1700000000100  # STORETIMESTAMP at 48 + bornHostLength
    assert len(rec.offset_msg_id) == 56


def test_ipv4_hosts_clear_stale_ipv6_bits():
    rec = decode_record(encode_record(**worked_example_fields(sys_flag=codec.FLAG_BORNHOST_V6 | 0x8)))
    assert rec.sys_flag == 0x8


def test_long_topic_switches_to_v2_and_explicit_v2_works_for_short_topics():
    long_topic = "%RETRY%" + "g" * 200
    rec = decode_record(encode_record(**worked_example_fields(topic=long_topic)))
    assert rec.magic == MAGIC_V2 and rec.topic == long_topic
    raw = encode_record(**worked_example_fields(magic=MAGIC_V2))
    assert len(raw) == 105 and raw[4:8] == bytes.fromhex("DAA320AB")
    assert decode_record(raw).topic == "T"
    with pytest.raises(OptionError, match="topic"):
        encode_record(**worked_example_fields(topic=long_topic, magic=MAGIC_V1))


def test_bad_hosts_and_ports_are_rejected_on_encode():
    with pytest.raises(OptionError, match="host"):
        encode_record(**worked_example_fields(store_host=("broker.example", 10911)))
    with pytest.raises(OptionError, match="port"):
        encode_record(**worked_example_fields(born_host=("127.0.0.1", 70000)))
    assert HostAddress.parse("[::1]:10911") == ("::1", 10911)
    assert HostAddress.parse("10.0.0.1:9876") == ("10.0.0.1", 9876)


def test_oversized_properties_are_rejected():
    with pytest.raises(OptionError, match="32767"):
        encode_record(**worked_example_fields(properties={"K": "v" * 40000}))


# --- round trips ------------------------------------------------------------------------------
ipv4 = st.ip_addresses(v=4).map(str)
ipv6 = st.ip_addresses(v=6).map(str)
hosts = st.builds(HostAddress, st.one_of(ipv4, ipv6), st.integers(0, 65535))
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                    max_size=20)
props = st.dictionaries(prop_text, prop_text, max_size=6)
topics = st.one_of(st.text("abcXYZ_-%|0123456789", min_size=1, max_size=127),
                   st.text("abc", min_size=128, max_size=300))
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


def same_ip(a: str, b: str) -> bool:
    return ipaddress.ip_address(a) == ipaddress.ip_address(b)


@st.composite
def record_fields(draw):
    return dict(
        topic=draw(topics), queue_id=draw(int32), body=draw(st.binary(max_size=300)), properties=draw(props),
        flag=draw(int32), queue_offset=draw(int64), physical_offset=draw(int64),
        sys_flag=draw(int32) & ~0x31,  # bit 0 is exercised by the compression tests
        born_timestamp=draw(int64), born_host=draw(hosts), store_timestamp=draw(int64),
        store_host=draw(hosts), reconsume_times=draw(int32), prepared_transaction_offset=draw(int64),
    )


@settings(max_examples=150, deadline=None)
@given(record_fields())
def test_record_round_trip(fields):
    raw = encode_record(**fields)
    rec = decode_record(raw)
    born_v6, store_v6 = ":" in fields["born_host"].host, ":" in fields["store_host"].host
    assert rec.total_size == len(raw) == record_size(
        len(fields["body"]), len(fields["topic"].encode()), len(encode_properties(fields["properties"])),
        born_v6=born_v6, store_v6=store_v6, v2=rec.magic == MAGIC_V2)
    assert rec.magic == (MAGIC_V2 if len(fields["topic"]) > 127 else MAGIC_V1)
    for name in ("topic", "queue_id", "body", "properties", "flag", "queue_offset", "physical_offset",
                 "born_timestamp", "store_timestamp", "reconsume_times", "prepared_transaction_offset"):
        assert getattr(rec, name) == fields[name], name
    for got, sent in ((rec.born_host, fields["born_host"]), (rec.store_host, fields["store_host"])):
        assert got.port == sent.port and same_ip(got.host, sent.host)  # text may be canonicalised
    assert rec.sys_flag & ~0x30 == fields["sys_flag"]
    assert rec.body_crc == masked_crc32(fields["body"])
    assert rec.encode() == raw
    # a record in the middle of a larger buffer decodes the same, from memoryview and numpy views too
    framed = b"\x00" * 13 + raw + b"\xff" * 5
    assert decode_record(memoryview(framed), 13) == rec
    assert decode_record(np.frombuffer(framed, np.uint8), 13, base_offset=1000) == rec


@settings(max_examples=100, deadline=None)
@given(props)
def test_properties_round_trip(p):
    assert decode_properties(encode_properties(p)) == p


def test_non_ascii_properties_round_trip_through_a_record():
    p = {"KEYS": "订单 123", "TAGS": "标签A", "emoji": "\U0001F680", "UNIQ_KEY": "ABC"}
    rec = decode_record(encode_record(**worked_example_fields(properties=p)))
    assert rec.properties == p
    assert rec.tags == "标签A" and rec.keys == "订单 123" and rec.uniq_key == rec.msg_id == "ABC"
    assert rec.tags_code == java_hash("标签A")


def test_empty_body_and_empty_properties():
    rec = decode_record(encode_record(**worked_example_fields(body=b"", properties={})))
    assert rec.total_size == 91 + 1 and rec.body == b"" and rec.properties == {} and rec.body_crc == 0


@pytest.mark.parametrize("compression", [codec.COMPRESSION_ZLIB, codec.COMPRESSION_LZ4, codec.COMPRESSION_ZSTD])
def test_compressed_bodies_decode_by_type_bits(compression):
    body = b"RocketMQ " * 1000
    stored, bits = codec.compress_body(body, compression=compression)
    assert bits == codec.FLAG_COMPRESSED | (compression << 8)
    rec = decode_record(encode_record(**worked_example_fields(body=stored, sys_flag=bits)))
    assert rec.body == stored and rec.body_crc == masked_crc32(stored)  # CRC covers the stored bytes
    assert rec.uncompressed_body() == body


def test_default_compression_is_zlib_level_5():
    body = bytes(range(256)) * 40
    stored, bits = codec.compress_body(body)
    assert stored == zlib.compress(body, 5) and bits == 0x301


def test_type_bits_zero_mean_zlib_and_uncompressed_bodies_pass_through():
    body = b"x" * 5000
    assert codec.decompress_body(zlib.compress(body), codec.FLAG_COMPRESSED) == body
    assert codec.decompress_body(b"raw", 0x300) == b"raw"  # bit 0 clear: type bits alone mean nothing
    assert codec.decompress_body(lz4.frame.compress(body), 0x101) == body
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(body)
    assert codec.decompress_body(no_size, 0x201) == body


@pytest.mark.parametrize("flags, data", [(0x301, b"not zlib"), (0x101, b"not lz4"), (0x201, b"not zstd"),
                                         (0x201, zstandard.ZstdCompressor().compress(b"y" * 999)[:-4]),
                                         (0x401, zlib.compress(b"ok"))])
def test_undecompressable_body_is_corruption_naming_file_and_offset(flags, data):
    rec = decode_record(encode_record(**worked_example_fields(body=data, sys_flag=flags, physical_offset=4096)))
    with pytest.raises(CorruptStoreError) as info:
        rec.uncompressed_body(path="/s/commitlog/00000000000000000000")
    assert info.value.offset == 4096 and info.value.path.endswith("00000000000000000000")


# --- properties parsing edge cases (MessageDecoder.string2messageProperties) -------------------
@pytest.mark.parametrize("raw, expected", [
    (b"A\x011\x02B\x012", {"A": "1", "B": "2"}),              # last entry without trailing 0x02
    (b"A\x01\x02B\x012\x02", {"B": "2"}),                    # empty value dropped
    (b"\x01x\x02B\x012\x02", {"B": "2"}),                    # empty name dropped
    (b"A\x011\x02A\x012\x02", {"A": "2"}),                   # later duplicate wins
    (b"A\x01x\x01y\x02", {"A": "x\x01y"}),                   # split at the first 0x01 only
    (b"noseparator\x02\x02\x02", {}),                        # segments without 0x01 dropped
    (b"", {}),
    ("K\x01é\x02".encode(), {"K": "é"}),
])
def test_properties_parse_edge_cases(raw, expected):
    assert decode_properties(raw) == expected


def test_encode_properties_skips_none_and_rejects_separators():
    assert encode_properties({"A": "1", "B": None}) == b"A\x011\x02"
    with pytest.raises(OptionError, match="properties"):
        encode_properties({"A": "x\x02y"})
    with pytest.raises(OptionError, match="properties"):
        encode_properties({"A\x01": "y"})


def test_invalid_utf8_properties_decode_with_replacement_characters_as_java():
    # Java's new String(bytes, UTF_8) never fails, and neither may we
    assert decode_properties(b"A\x01\xff\xfe\x02", path="f", offset=7) == {"A": "\ufffd\ufffd"}


# --- bad records ------------------------------------------------------------------------------
def test_blank_record():
    assert encode_blank(8) == struct.pack(">ii", 8, BLANK_MAGIC)
    assert decode_record(b"\x00" * 16 + encode_blank(1234), 16) is None
    with pytest.raises(OptionError):
        encode_blank(7)


def test_truncated_at_every_position_raises_naming_the_offset():
    raw = encode_record(**worked_example_fields(born_host=("::1", 5)))
    for cut in range(len(raw)):
        with pytest.raises(CorruptStoreError) as info:
            decode_record(b"\xaa" * 3 + raw[:cut], 3, path="/x/commitlog/0", base_offset=1 << 30)
        assert info.value.offset == (1 << 30) + 3 and info.value.path == "/x/commitlog/0"
        assert "truncated" in str(info.value)


def corrupt_message(raw: bytes, **kw) -> str:
    with pytest.raises(CorruptStoreError) as info:
        decode_record(raw, path="cl", **kw)
    assert info.value.offset == 0 and info.value.path == "cl"
    return str(info.value)


def patch(raw: bytes, pos: int, fmt_: str, value: int) -> bytes:
    buf = bytearray(raw)
    struct.pack_into(fmt_, buf, pos, value)
    return bytes(buf)


def test_flipped_magic():
    assert "MAGICCODE" in corrupt_message(patch(WORKED_EXAMPLE, 4, ">i", MAGIC_V1 ^ 0x100))
    assert "MAGICCODE" in corrupt_message(bytes(200))  # pre-allocated zeros are not a record


def test_crc_flip_is_detected_only_when_checking():
    bad = patch(WORKED_EXAMPLE, 8, ">i", 1486039725)
    assert "BODYCRC" in corrupt_message(bad)
    assert decode_record(bad, check_crc=False).body_crc == 1486039725
    flipped_body = WORKED_EXAMPLE[:88] + b"hj" + WORKED_EXAMPLE[90:]
    assert "BODYCRC" in corrupt_message(flipped_body)


@pytest.mark.parametrize("pos, fmt_, value, words", [
    (0, ">i", 103, "length formula"),          # TOTALSIZE one short
    (0, ">i", 50, "smallest"),                 # TOTALSIZE below any record
    (0, ">i", -5, "smallest"),
    (84, ">i", -1, "BODY length"),             # negative body length
    (84, ">i", 2**31 - 1, "BODY length"),      # oversized body length
    (90, ">b", -1, "TOPIC length"),            # negative topic length (V1 is a signed byte)
    (90, ">b", 100, "TOPIC length"),
    (92, ">h", -3, "PROPERTIES"),
    (92, ">h", 9, "length formula"),           # properties one shorter than TOTALSIZE says
    (50, ">i", 70000, "port"),
    (36, ">i", 0x10, "port"),                  # IPv6 bit on an IPv4 record: address bytes read as port
    (36, ">i", 0x30, "hosts"),                 # both IPv6 bits: the fields no longer fit
])
def test_inconsistent_lengths_are_corruption(pos, fmt_, value, words):
    assert words in corrupt_message(patch(WORKED_EXAMPLE, pos, fmt_, value))


def test_longer_totalsize_than_formula_is_a_mismatch():
    raw = patch(WORKED_EXAMPLE + b"\x00" * 4, 0, ">i", 108)
    assert "length formula gives 104 but TOTALSIZE is 108" in corrupt_message(raw)


def test_invalid_utf8_topic_and_properties_in_a_record_decode_as_java():
    bad_topic = WORKED_EXAMPLE[:91] + b"\xff" + WORKED_EXAMPLE[92:]
    assert decode_record(bad_topic).topic == "\ufffd"
    bad_props = WORKED_EXAMPLE[:-2] + b"\xc3\x02"
    assert decode_record(bad_props).properties == {"WAIT": "tru\ufffd"}


def test_negative_position_and_empty_buffer():
    with pytest.raises(CorruptStoreError):
        decode_record(WORKED_EXAMPLE, -1)
    with pytest.raises(CorruptStoreError):
        decode_record(b"")


# --- tags code of delayed messages --------------------------------------------------------------
@pytest.mark.parametrize("delay, expected_delta", [("1", 1000), ("3", 10_000), ("18", 7_200_000),
                                                   ("99", 7_200_000), ("0", None), ("-2", None)])
def test_schedule_topic_tags_code_is_delivery_time(delay, expected_delta):
    p = {"DELAY": delay, "TAGS": "TagA"}
    code = cq_tags_code(codec.SCHEDULE_TOPIC, p, 1_700_000_000_000)
    assert code == (2598919 if expected_delta is None else 1_700_000_000_000 + expected_delta)


def test_schedule_tags_code_unknown_level_adds_one_second_and_custom_levels():
    assert cq_tags_code(codec.SCHEDULE_TOPIC, {"DELAY": "2"}, 100, delay_levels={1: 5, 3: 7}) == 1100
    assert cq_tags_code(codec.SCHEDULE_TOPIC, {"DELAY": "9"}, 100, delay_levels={1: 5, 3: 7}) == 107
    assert cq_tags_code(codec.SCHEDULE_TOPIC, {"DELAY": "2"}, 100, delay_levels=(1000, 2000)) == 2100
    assert cq_tags_code("Normal", {"DELAY": "2", "TAGS": "*"}, 100) == 42


def test_schedule_tags_code_bad_delay_is_corruption():
    with pytest.raises(CorruptStoreError, match="DELAY"):
        cq_tags_code(codec.SCHEDULE_TOPIC, {"DELAY": "two"}, 0, path="cl", offset=9)


def test_parse_delay_levels():
    default = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    assert codec.parse_delay_levels(default) == codec.DELAY_LEVELS_MS
    assert codec.parse_delay_levels("2d") == (172_800_000,)


# --- unique keys --------------------------------------------------------------------------------
def test_uniq_keys_are_32_upper_hex_and_unique():
    keys = [new_uniq_key() for _ in range(70_000)]  # more than the 16-bit counter holds
    assert len(set(keys)) == len(keys)
    assert all(len(k) == 32 and k == k.upper() for k in keys[:100])
    int(keys[0], 16)
    assert len({k[:20] for k in keys}) == 1  # IP + pid + random part is fixed per process (and month)


def test_uniq_key_survives_clock_stepping_back(monkeypatch):
    now = [1_700_000_000_000 * 1_000_000]
    monkeypatch.setattr(codec.ids.time, "time_ns", lambda: now[0])
    monkeypatch.setattr(codec.ids, "_uniq_state", None)
    first = [new_uniq_key() for _ in range(3)]
    now[0] -= 5_000 * 1_000_000
    later = [new_uniq_key() for _ in range(3)]
    assert len(set(first + later)) == 6
    assert sorted(k[20:] for k in first + later) == [k[20:] for k in first + later]


# --- consume-queue units ------------------------------------------------------------------------
def test_cq_unit_layout_and_vector_decode():
    unit = encode_cq_unit(1073741824, 104, -1656969516)
    assert unit == struct.pack(">qiq", 1073741824, 104, -1656969516) and len(unit) == codec.CQ_UNIT_SIZE
    units = np.frombuffer(unit + encode_cq_unit(5, 6, 7), dtype=CQ_DTYPE)
    assert units.dtype == CQ_DTYPE and CQ_DTYPE.itemsize == 20
    assert units["offset"].tolist() == [1073741824, 5]
    assert units["size"].tolist() == [104, 6]
    assert units["tags_code"].tolist() == [-1656969516, 7]


# --- client batch wire format (MessageDecoder.encodeMessages) ------------------------------------
def test_batch_body_layout():
    raw = encode_batch_body([(7, b"hi", {"WAIT": "true"})])
    assert raw == struct.pack(">iiiii", 34, 0, 0, 7, 2) + b"hi" + struct.pack(">h", 10) + b"WAIT\x01true\x02"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(int32, st.binary(max_size=100), props), max_size=5))
def test_batch_body_round_trip(entries):
    decoded = decode_batch_body(encode_batch_body(entries))
    assert [tuple(e) for e in decoded] == [(f, b, p) for f, b, p in entries]


def test_truncated_or_inconsistent_batch_is_corruption():
    raw = encode_batch_body([(0, b"a", {"K": "v"}), (1, b"bb", {})])
    first_len = struct.unpack_from(">i", raw)[0]
    for cut in range(1, len(raw)):
        if cut == first_len:
            continue  # a whole first entry is a valid batch of one
        with pytest.raises(CorruptStoreError):
            decode_batch_body(raw[:cut])
    bad = bytearray(raw)
    struct.pack_into(">i", bad, first_len + 16, 50)  # second entry's body length
    with pytest.raises(CorruptStoreError) as info:
        decode_batch_body(bytes(bad), base_offset=100)
    assert info.value.offset == 100 + first_len
