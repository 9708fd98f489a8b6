"""The one record validator: ``codec.check_record`` (one record) and ``arrow_records.record_problems``
(many records, numpy) make the same checks in the same order — the checks
``CommitLog.checkMessageAndReturnSize`` makes (docs/store-format.md) — so recovery, readers, bulk
reads and check agree on which records are damaged and why.

Valid records come from ``encode_record``; then bytes are flipped, length fields edited and the
buffer cut. For every position both validators give the same verdict, and a failing record fails the
same check first. Properties are never a check: neither validator looks at a trailing 0x02 or at UTF-8.
"""

from __future__ import annotations

import os
import struct

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rocketstream import codec
from rocketstream.codec import RECORD_CHECKS, check_record, decode_record, encode_record
from rocketstream.codec import arrow_records as ar

HOSTS = st.sampled_from(["10.0.0.7", "192.168.1.1", "::1", "fe80::1"])
TOPICS = st.one_of(st.text(st.characters(min_codepoint=33, max_codepoint=0x7FF), min_size=1, max_size=12),
                   st.just("T" * 130))   # a topic longer than 127 bytes needs the V2 magic

record_fields = st.fixed_dictionaries({
    "topic": TOPICS,
    "v2": st.booleans(),
    "body": st.binary(max_size=48),
    "properties": st.binary(max_size=40),   # raw bytes: any trailer, any UTF-8 or none
    "born_host": st.tuples(HOSTS, st.integers(0, 0xFFFF)),
    "store_host": st.tuples(HOSTS, st.integers(0, 0xFFFF)),
    "queue_id": st.integers(0, 7),
    "queue_offset": st.integers(0, 2**40),
    "sys_flag": st.integers(0, 0xFF),
})

# (which field, how to change it): lengths one off or far off, signs flipped, magic and host bits
FIELD_EDITS = st.tuples(
    st.sampled_from(["total", "magic", "sys_flag", "body_len", "topic_len", "props_len", "physical", "born_port"]),
    st.sampled_from([-1, 1, 2, -2, 12, -12, 1 << 16, -(1 << 20), 2**31 - 1, -(2**31), 0, 0x10, 0x20, 0x30,
                     0x12345678]))


def build(records: list[dict], prefix: int, base_offset: int, misplace: set[int]) -> tuple[bytearray, list[int]]:
    buf = bytearray(b"\xab" * prefix)
    starts = []
    for i, f in enumerate(records):
        pos = len(buf)
        starts.append(pos)
        physical = base_offset + pos + (8 if i in misplace else 0)
        buf += encode_record(
            topic=f["topic"], queue_id=f["queue_id"], body=f["body"], properties=f["properties"],
            queue_offset=f["queue_offset"], physical_offset=physical, sys_flag=f["sys_flag"],
            born_timestamp=1_700_000_000_000, born_host=f["born_host"], store_timestamp=1_700_000_000_123 + i,
            store_host=f["store_host"],
            magic=codec.MAGIC_V2 if f["v2"] or len(f["topic"].encode()) > 127 else codec.MAGIC_V1)
    return buf, starts


def edit(buf: bytearray, start: int, lay: codec.RecordLayout, field: str, delta: int) -> None:
    """Change one header field of the record at ``start`` (``lay``: its layout as encoded)."""
    at, fmt = {"total": (0, ">i"), "magic": (4, ">i"), "sys_flag": (36, ">i"), "physical": (28, ">q"),
               "body_len": (lay.body_pos - 4, ">i"),
               "topic_len": (lay.topic_pos - (2 if lay.magic == codec.MAGIC_V2 else 1),
                             ">h" if lay.magic == codec.MAGIC_V2 else ">b"),
               "props_len": (lay.props_pos - 2, ">h"), "born_port": (start + 48 + (16 if lay.sys_flag & 0x10 else 4),
                                                                     ">i")}[field]
    at = at + start if field in ("total", "magic", "sys_flag", "physical") else at
    (old,) = struct.unpack_from(fmt, buf, at)
    bits = struct.calcsize(fmt) * 8
    new = old ^ delta if field in ("magic", "sys_flag") else old + delta
    new = (new + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))   # wrap into the field's range
    struct.pack_into(fmt, buf, at, new)


def assert_agree(buf: bytes, positions: list[int], *, base_offset: int, check_crc: bool, check_ports: bool,
                 check_position: bool, topic_len_hint: int | None) -> None:
    rel = np.array(positions, dtype=np.int64)
    h = ar.decode_headers(buf, rel, topic_len_hint=topic_len_hint)
    problems = ar.record_problems(buf, h, rel, base_offset=base_offset, check_crc=check_crc,
                                  check_ports=check_ports, check_position=check_position)
    order = list(RECORD_CHECKS)
    assert [order.index(k) for k in problems] == sorted(order.index(k) for k in problems)
    assert ("crc" in problems, "ports" in problems, "position" in problems) == (check_crc, check_ports,
                                                                                check_position)
    bad = ar.any_problem(problems)
    for i, pos in enumerate(positions):
        problem, lay = check_record(buf, pos, base_offset=base_offset, check_crc=check_crc,
                                    check_ports=check_ports, check_position=check_position)
        first = next((k for k, mask in problems.items() if mask[i]), None)
        assert (problem.check if problem else None) == first, (pos, problem, first)
        event(f"first failed check: {first}")
        assert bool(bad[i]) == (problem is not None)
        if lay is not None:   # the values a passing record is used for are the stored ones, in both
            assert (int(h["total_size"][i]), int(h["body_pos"][i]), int(h["body_len"][i]), int(h["topic_pos"][i]),
                    int(h["topic_len"][i]), int(h["props_pos"][i]), int(h["props_len"][i]),
                    int(h["physical_offset"][i]), int(h["store_timestamp"][i]), int(h["sys_flag"][i])) == (
                lay.total_size, lay.body_pos, lay.body_len, lay.topic_pos, lay.topic_len, lay.props_pos,
                lay.props_len, lay.physical_offset, lay.store_timestamp, lay.sys_flag)


# 150 examples in the default run; 500 with ROCKETSTREAM_FUZZ_FULL=1 (as tests/reliability/test_broker_fuzz.py)
@settings(max_examples=500 if os.environ.get("ROCKETSTREAM_FUZZ_FULL") == "1" else 150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record_fields, min_size=1, max_size=5), prefix=st.integers(0, 9),
       base_offset=st.sampled_from([0, 1 << 30, 4096]), misplace=st.sets(st.integers(0, 4), max_size=1),
       flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=3),
       edits=st.lists(st.tuples(st.integers(0, 4), FIELD_EDITS), max_size=2),
       cut=st.one_of(st.none(), st.integers(0, 10_000)), extra=st.lists(st.integers(-3, 10_000), max_size=3),
       flags=st.tuples(st.booleans(), st.booleans(), st.booleans()), hinted=st.booleans())
def test_scalar_and_vector_validators_agree(records, prefix, base_offset, misplace, flips, edits, cut, extra, flags,
                                            hinted) -> None:
    buf, starts = build(records, prefix, base_offset, misplace)
    layouts = [check_record(bytes(buf), pos, check_crc=True, check_position=False)[1] for pos in starts]
    for k, (field, delta) in edits:
        lay = layouts[k % len(starts)]
        assert lay is not None
        edit(buf, starts[k % len(starts)], lay, field, delta)
    for at, mask in flips:
        buf[at % len(buf)] ^= mask
    if cut is not None:
        del buf[cut % (len(buf) + 1):]
    check_crc, check_ports, check_position = flags
    hint = len(records[0]["topic"].encode()) if hinted else None
    positions = starts + [e % (len(buf) + 3) - 3 if e >= 0 else e for e in extra]
    assert_agree(bytes(buf), positions, base_offset=base_offset, check_crc=check_crc, check_ports=check_ports,
                 check_position=check_position, topic_len_hint=hint)


@settings(max_examples=200, deadline=None)
@given(records=st.lists(record_fields, min_size=1, max_size=4), flags=st.tuples(st.booleans(), st.booleans()))
def test_valid_records_pass_both_whatever_their_properties_bytes(records, flags) -> None:
    buf, starts = build(records, 3, 4096, set())
    check_crc, check_ports = flags
    for pos in starts:
        problem, lay = check_record(bytes(buf), pos, base_offset=4096, check_crc=check_crc, check_ports=check_ports)
        assert problem is None and lay is not None
    rel = np.array(starts, dtype=np.int64)
    h = ar.decode_headers(bytes(buf), rel)
    problems = ar.record_problems(bytes(buf), h, rel, base_offset=4096, check_crc=check_crc, check_ports=check_ports,
                                  expected_sizes=h["total_size"])
    assert not ar.any_problem(problems).any(), {k: m.tolist() for k, m in problems.items() if m.any()}


def one_record(properties: bytes) -> bytes:
    return encode_record(topic="T", queue_id=0, body=b"hello", properties=properties, queue_offset=0,
                         physical_offset=0, sys_flag=0, born_timestamp=1, born_host=("1.2.3.4", 5),
                         store_timestamp=2, store_host=("1.2.3.4", 10911))


def passes_everywhere(raw: bytes) -> None:
    problem, lay = check_record(raw, 0, check_crc=True, check_ports=True)
    assert problem is None and lay is not None
    rel = np.zeros(1, dtype=np.int64)
    h = ar.decode_headers(raw, rel, topic_len_hint=1)
    problems = ar.record_problems(raw, h, rel, check_crc=True, check_ports=True, expected_sizes=h["total_size"])
    assert not ar.any_problem(problems).any()
    assert decode_record(raw, check_position=True) is not None


def test_properties_without_a_trailing_0x02_are_not_rejected() -> None:
    # brokers 4.9.1 to 5.1.4 write no 0x02 after the last property (docs/store-format.md)
    passes_everywhere(one_record(b"UNIQ_KEY\x01AB12\x02TAGS\x01TagA"))
    passes_everywhere(one_record(b"TAGS\x01TagA"))
    passes_everywhere(one_record(b"\x01"))


def test_properties_that_are_not_utf8_are_not_rejected() -> None:
    # Java's new String(bytes, UTF_8) decodes them with replacement characters and never fails
    passes_everywhere(one_record(b"TAGS\x01\xff\xfe\x02"))
    passes_everywhere(one_record(b"\xc3\x01\xc3"))
    passes_everywhere(one_record(b"\xed\xa0\x80\x01\x80"))   # a UTF-16 surrogate encoded, then a lone continuation
    assert decode_record(one_record(b"TAGS\x01\xff\xfe\x02")).properties == {"TAGS": "\ufffd\ufffd"}
