"""Bytes a real broker's store may hold that our own writer never produces (docs/store-format.md).

* PROPERTIES with or without a trailing 0x02 (4.9.1-5.1.4 drop it; older and 5.2+ write it), and
  non-UTF-8 property bytes (batch records copy a non-Java client's bytes): decoded as Java's
  ``new String(bytes, UTF_8)`` + ``MessageDecoder.string2messageProperties`` do, never an error.
* ``__CRC32#`` (5.x ``enabledAppendPropCRC``): an ordinary property to a consumer.
* ConsumeQueueExt addresses in a unit's tagsCode: the tag filter reads the record's TAGS.
* LMQ queues (``%LMQ%...``): units of another topic's records, listed in INNER_MULTI_DISPATCH.
* A custom ``messageDelayLevel``: the SCHEDULE_TOPIC_XXXX tagsCode dispatch writes and check expects.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream import codec
from rocketstream.codec import (
    CQ_DTYPE,
    HostAddress,
    decode_batch_body,
    decode_properties,
    decode_record,
    encode_record,
)
from rocketstream.codec import arrow_records as ar
from rocketstream.store import Message, MessageStore
from tests.store.storeutil import CQ_SIZE, open_small, small_config
from tests.store.test_bulk_read import FakeCommitLog, expected_rows, read_rows

BORN, STORE = HostAddress("10.1.2.3", 54321), HostAddress("127.0.0.1", 10911)

# (bytes, what Java 17's ``new String(bytes, StandardCharsets.UTF_8)`` gives), obtained by running
# that constructor on each input. Python's errors="replace" agrees except for ED A0..BF (encoded
# UTF-16 surrogates): Java replaces the whole 2- or 3-byte sequence with one U+FFFD.
JAVA_UTF8 = [
    (b"A\xffB", "A\ufffdB"),
    (b"\xc3", "\ufffd"),                       # truncated 2-byte sequence at the end
    (b"\xc3(", "\ufffd("),
    (b"\xe2\x82", "\ufffd"),                   # truncated 3-byte sequence: one U+FFFD
    (b"\xe2\x82(", "\ufffd("),
    (b"\xed\xa0\x80", "\ufffd"),               # encoded surrogate: Python gives three U+FFFD
    (b"\xed\xa0", "\ufffd"),                   # Python: two
    (b"\xed\xa0A", "\ufffdA"),                 # Python: two + A
    (b"\xed\xbf\xbfA", "\ufffdA"),             # Python: three + A
    (b"\xed\x9f\xbf", "\ud7ff"),               # the last code point before the surrogates is fine
    (b"\xf0\x9f\x98", "\ufffd"),               # truncated 4-byte sequence
    (b"\xf0\x9f\x98\x80", "\U0001F600"),
    (b"\xf0\x8f\x80\x80", "\ufffd" * 4),       # overlong
    (b"\xf4\x90\x80\x80", "\ufffd" * 4),       # beyond U+10FFFF
    (b"\xc0\xaf", "\ufffd" * 2),
    (b"\xe0\x80\x9f", "\ufffd" * 3),
    (b"\x80\xbfA", "\ufffd\ufffdA"),           # lone continuation bytes
    (b"\xfe", "\ufffd"),
    (b"TAGs\x01\xe2\x82\x02", "TAGs\x01\ufffd\x02"),  # a separator is never swallowed
]


@pytest.mark.parametrize("raw,expected", JAVA_UTF8)
def test_java_utf8_replacement_vectors(raw, expected):
    assert codec.decode_java_utf8(raw) == expected


def _java_oracle(tmp_dir: Path, inputs: list[bytes]) -> list[str] | None:
    """``new String(b, UTF_8)`` of every input, from a tiny Java program compiled here (None without a JDK)."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if not (javac and java):
        return None
    src = tmp_dir / "Utf8Oracle.java"
    src.write_text(
        "import java.io.*; import java.nio.charset.StandardCharsets;\n"
        "public class Utf8Oracle { public static void main(String[] a) throws Exception {\n"
        "  BufferedReader r = new BufferedReader(new InputStreamReader(System.in));\n"
        "  StringBuilder o = new StringBuilder();\n"
        "  for (String line; (line = r.readLine()) != null;) { byte[] b = new byte[line.length() / 2];\n"
        "    for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(line.substring(2 * i, 2 * i + 2), 16);\n"
        "    String s = new String(b, StandardCharsets.UTF_8);\n"
        "    for (int i = 0; i < s.length(); i++) o.append(String.format(\"%04x\", (int) s.charAt(i)));\n"
        "    o.append('\\n'); }\n"
        "  System.out.print(o); } }\n")
    subprocess.run([javac, "-d", str(tmp_dir), str(src)], check=True, capture_output=True, timeout=120)
    out = subprocess.run([java, "-cp", str(tmp_dir), "Utf8Oracle"], input="".join(b.hex() + "\n" for b in inputs),
                         capture_output=True, text=True, check=True, timeout=120).stdout.split("\n")
    return [bytes.fromhex(line).decode("utf-16-be") for line in out[:len(inputs)]]


def test_java_utf8_matches_the_jdk_on_random_malformed_bytes(tmp_path):
    """20,000 random byte strings weighted towards UTF-8 lead/continuation bytes, checked against the JDK."""
    rng = random.Random(10)
    alphabet = [0x01, 0x02, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1,
                0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF8, 0xFF]
    inputs = [bytes(rng.choice(alphabet) if rng.random() < 0.9 else rng.randrange(256)
                    for _ in range(rng.randint(1, 12))) for _ in range(20_000)]
    expected = _java_oracle(tmp_path, inputs)
    if expected is None:
        pytest.skip("no JDK (javac/java) on PATH")
    mismatches = [(raw, want) for raw, want in zip(inputs, expected, strict=True)
                  if codec.decode_java_utf8(raw) != want]
    assert not mismatches, mismatches[:5]


# --- the properties codec -------------------------------------------------------------------------
names = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(names, names, max_size=6))
def test_both_trailing_separator_forms_decode_alike(props):
    raw = codec.encode_properties(props)
    assert decode_properties(raw) == props
    assert decode_properties(raw[:-1]) == props   # as 4.9.1-5.1.4 write it


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_property_bytes_never_raise_and_parse_the_java_string(raw):
    got = decode_properties(raw)
    text = codec.decode_java_utf8(raw)
    want = {}
    for segment in text.split("\x02"):   # MessageDecoder.string2messageProperties on the decoded string
        name, sep, value = segment.partition("\x01")
        if name and value:
            want[name] = value
    assert got == want


def test_invalid_utf8_in_topic_and_properties_decodes_like_java():
    raw = encode_record(topic="T", queue_id=0, body=b"b", properties=b"TAGS\x01\xed\xa0\x80x\x02KEYS\x01k\xff",
                        queue_offset=0, physical_offset=0, sys_flag=0, born_timestamp=1, born_host=BORN,
                        store_timestamp=2, store_host=STORE)
    rec = decode_record(raw)
    assert rec.properties == {"TAGS": "\ufffdx", "KEYS": "k\ufffd"}
    # a topic byte that is not UTF-8 (never valid for a broker, but must not stop a scan)
    bad_topic = raw.replace(b"\x01T\x00", b"\x01\xc3\x00", 1)
    assert decode_record(bad_topic).topic == "\ufffd"


def test_batch_inner_properties_keep_the_client_bytes_and_decode_like_java():
    body = codec.encode_batch_body([(0, b"a", b"TAGS\x01\xc3\x02UNIQ_KEY\x01U1"), (0, b"b", b"TAGS\x01ok")])
    entries = decode_batch_body(body)
    assert [e.properties for e in entries] == [{"TAGS": "\ufffd", "UNIQ_KEY": "U1"}, {"TAGS": "ok"}]


def test_crc32_property_is_an_ordinary_property():
    """5.x ``enabledAppendPropCRC``: ``__CRC32#`` + 0x01 + ten digits (least significant first) + 0x02,
    the last 20 bytes of PROPERTIES; the Java client keeps it in the message's properties."""
    props = b"TAGS\x01A\x02UNIQ_KEY\x01" + b"C" * 32 + b"\x02__CRC32#\x014321000000\x02"
    raw = encode_record(topic="T", queue_id=0, body=b"b", properties=props, queue_offset=0, physical_offset=0,
                        sys_flag=0, born_timestamp=1, born_host=BORN, store_timestamp=2, store_host=STORE)
    assert decode_record(raw).properties["__CRC32#"] == "4321000000"


# --- the vectorized parser ---------------------------------------------------------------------
def _uniform(n: int, terminated: bool) -> list[bytes]:
    rows = [b"UNIQ_KEY\x01%032X\x02WAIT\x01true\x02TAGS\x01T%d\x02KEYS\x01k%d\x02" % (i, i % 3, i) for i in range(n)]
    return rows if terminated else [r[:-1] for r in rows]


@pytest.mark.parametrize("terminated", [True, False])
def test_uniform_fast_path_takes_both_separator_forms(terminated):
    raws = _uniform(50, terminated)
    arr = pa.array(raws, pa.binary()).cast(pa.string())
    roff, blob = ar._string_parts(arr)
    fast = ar._parse_uniform(roff, blob, ("TAGS", "KEYS", "UNIQ_KEY", "MISSING"))
    assert fast is not None, "a batch of 4.9.8-style records must not fall off the uniform fast path"
    result, columns = fast
    assert [dict(m) for m in result.to_pylist()] == [decode_properties(r) for r in raws]
    assert columns["TAGS"].to_pylist() == [decode_properties(r)["TAGS"] for r in raws]
    assert columns["MISSING"].null_count == 50


def test_parse_properties_with_mixed_forms_and_near_uniform_batches():
    raws = _uniform(10, False) + _uniform(10, True)
    odd = _uniform(10, False)
    odd[4] = odd[4] + b"\x02"                      # one terminated record among unterminated ones
    odd2 = _uniform(10, False)
    odd2[7] = odd2[7].replace(b"\x02KEYS", b"KEYS")  # a record with one separator fewer
    odd3 = _uniform(10, False)
    odd3[3] = odd3[3][:odd3[3].rindex(b"\x01") + 1]  # empty last value: dropped, not a uniform row
    for batch in (raws, odd, odd2, odd3):
        arr = pa.array(batch, pa.binary()).cast(pa.string())
        result, columns = ar.parse_properties(arr, ("TAGS", "KEYS"))
        want = [decode_properties(r) for r in batch]
        assert [dict(m) for m in result.to_pylist()] == want
        assert columns["KEYS"].to_pylist() == [w.get("KEYS") for w in want]


def test_properties_text_repairs_only_the_invalid_rows():
    raws = [b"A\x011", b"B\x01\xed\xa0\x80", None, b"C\x01\xc3", b"", b"D\x01\xe2\x82\x02E\x01e"] * 7
    text = ar.properties_text(pa.array(raws, pa.binary()))
    assert text.type == pa.string()
    assert text.to_pylist() == [None if r is None else codec.decode_java_utf8(r) for r in raws]


# --- the bulk read path -----------------------------------------------------------------------------
def test_bulk_rows_of_non_utf8_and_unterminated_properties_match_the_record_decoder():
    log = FakeCommitLog(file_size=4096)
    for i in range(30):
        props = b"UNIQ_KEY\x01%032X\x02TAGS\x01T%d\x02KEYS\x01k\xed\xa0\x80%d" % (i, i % 2, i)
        if i % 7 == 3:
            props += b"\x02"
        if i % 5 == 1:
            props = props.replace(b"TAGS\x01T", b"TAGS\x01\xc3T")
        log.append(topic="T", queue_id=0, properties=props)
    rows = read_rows(log, "T", 0)
    assert rows == expected_rows(log, "T", 0)
    assert rows[1]["tags"] == "\ufffdT1" and rows[0]["keys"] == "k\ufffd0"


def test_bulk_rows_show_crc32_property():
    log = FakeCommitLog(file_size=4096)
    for i in range(3):
        log.append(topic="T", queue_id=0, properties=b"TAGS\x01A\x02UNIQ_KEY\x01%032X\x02__CRC32#\x01%010d\x02"
                   % (i, 1234567890 + i))
    rows = read_rows(log, "T", 0)
    assert [r["properties"]["__CRC32#"] for r in rows] == ["1234567890", "1234567891", "1234567892"]
    assert rows == expected_rows(log, "T", 0)


EXT_ADDRESS = -(2**63) + 4096   # ConsumeQueueExt.decorate(4096): realOffset + Long.MIN_VALUE


def test_tag_filter_reads_the_tags_of_units_that_hold_a_cq_ext_address():
    log = FakeCommitLog(file_size=4096)
    for i in range(12):
        log.append(topic="T", queue_id=0, properties={"TAGS": "A" if i % 3 == 0 else "B", "UNIQ_KEY": f"{i:032X}"})
    units = log.units[("T", 0)]
    for i in range(0, 12, 2):   # every other unit: the tags code lives in the ext file
        offset, size, _ = units[i]
        units[i] = (offset, size, EXT_ADDRESS + 64 * i)
    rows = read_rows(log, "T", 0, tags={"A"})
    assert [r["queueOffset"] for r in rows] == [0, 3, 6, 9]
    assert all(r["tags"] == "A" for r in rows)
    # and the ext units that are not "A" are still dropped (by their record's TAGS)
    assert [r["queueOffset"] for r in read_rows(log, "T", 0, tags={"B"})] == [1, 2, 4, 5, 7, 8, 10, 11]


# --- stores on disk ------------------------------------------------------------------------------
@pytest.fixture
def unterminated(monkeypatch):
    """Make our writer encode PROPERTIES as RocketMQ 4.9.1-5.1.4 do: no 0x02 after the last entry."""
    original = codec.encode_properties
    monkeypatch.setattr(codec, "encode_properties", lambda props: original(props)[:-1] if props else b"")


def _write(root: Path, messages: list[Message], **kw) -> list:
    with open_small(root, **kw) as store:
        return [store.put_message(m, queue_id=0) for m in messages]


def test_msg_id_lookup_finds_a_uniq_key_that_is_the_last_property(tmp_path, unterminated):
    root = tmp_path / "s"
    _write(root, [Message("T", b"body-%d" % i) for i in range(5)])   # UNIQ_KEY is added last
    with MessageStore.open(root, read_only=True, config=small_config(root)) as ro:
        rec = ro.look_message_by_offset(ro.read_cq_units("T", 0, 2, 3)["offset"][0])
        assert list(rec.properties)[-1] == codec.PROPERTY_UNIQ_KEY
        found = ro.message_by_msg_id(rec.uniq_key)
        assert found.physical_offset == rec.physical_offset and found.body == b"body-2"


def test_check_passes_on_records_without_a_trailing_separator(tmp_path, unterminated):
    root = tmp_path / "s"
    _write(root, [Message("T", b"x" * 50, tags="A", keys="k") for _ in range(40)])
    with MessageStore.open(root, read_only=True, config=small_config(root)) as ro:
        report = ro.check()
        assert report.ok, report.problems
        assert report.records == 40 and report.units == 40


def test_check_still_finds_a_body_crc_mismatch(tmp_path):
    root = tmp_path / "s"
    _write(root, [Message("T", b"hello", tags="A")])
    path = root / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[88] ^= 0xFF   # first body byte
    path.write_bytes(bytes(data))
    with MessageStore.open(root, read_only=True, config=small_config(root)) as ro:
        report = ro.check()
        assert not report.ok and "BODYCRC" in report.problems[0].message and report.problems[0].offset == 0


def _crc_props(record_without_crc_tail: bytes) -> bytes:
    crc = codec.masked_crc32(record_without_crc_tail)
    return b"__CRC32#\x01" + str(crc).rjust(10, "0")[::-1].encode() + b"\x02"


def test_check_verifies_a_crc32_property_like_force_verify_prop_crc(tmp_path):
    root = tmp_path / "s"
    _write(root, [Message("T", b"a", tags="A"), Message("T", b"b", tags="A")])
    path = root / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    # Rewrite record 0 (whose PROPERTIES end with 0x02) with a 5.x CRC tail, and move record 1 back into place.
    with MessageStore.open(root, read_only=True, config=small_config(root)) as ro:
        r0, r1 = (ro.look_message_by_offset(int(o)) for o in ro.read_cq_units("T", 0, 0, 2)["offset"])
    props0 = codec.encode_properties(r0.properties) + b"__CRC32#\x01" + b"0" * 10 + b"\x02"
    fields = dict(topic="T", queue_id=0, sys_flag=0, born_timestamp=r0.born_timestamp, born_host=r0.born_host,
                  store_timestamp=r0.store_timestamp, store_host=r0.store_host)
    rec0 = encode_record(body=b"a", properties=props0, queue_offset=0, physical_offset=0, **fields)
    rec0 = rec0[:-20] + _crc_props(rec0[:-20])
    rec1 = encode_record(body=b"b", properties=codec.encode_properties(r1.properties), queue_offset=1,
                         physical_offset=len(rec0), **fields)
    data[:len(rec0) + len(rec1)] = rec0 + rec1
    path.write_bytes(bytes(data))
    cq = root / "consumequeue" / "T" / "0" / f"{0:020d}"
    units = np.zeros(CQ_SIZE // 20, dtype=CQ_DTYPE)
    units[0] = (0, len(rec0), codec.java_hash("A"))
    units[1] = (len(rec0), len(rec1), codec.java_hash("A"))
    cq.write_bytes(units.tobytes())
    with MessageStore.open(root, read_only=True, config=small_config(root)) as ro:
        report = ro.check()
        assert report.ok, report.problems
        assert ro.look_message_by_offset(0).properties["__CRC32#"] == _crc_props(rec0[:-20])[9:19].decode()
    data[40] ^= 1   # BORNTIMESTAMP: not covered by BODYCRC, covered by __CRC32#
    path.write_bytes(bytes(data))
    with MessageStore.open(root, read_only=True, config=small_config(root)) as ro:
        report = ro.check()
        assert len(report.problems) == 1 and "__CRC32#" in report.problems[0].message
        assert report.problems[0].offset == 0


def _write_units(root: Path, topic: str, queue_id: int, units: list[tuple[int, int, int]]) -> None:
    directory = root / "consumequeue" / topic / str(queue_id)
    directory.mkdir(parents=True, exist_ok=True)
    arr = np.zeros(CQ_SIZE // 20, dtype=CQ_DTYPE)
    for i, unit in enumerate(units):
        arr[i] = unit
    (directory / f"{0:020d}").write_bytes(arr.tobytes())


def test_check_validates_lmq_units_against_inner_multi_dispatch(tmp_path):
    root = tmp_path / "s"
    msgs = [Message("T", b"m%d" % i, tags="A", properties={
        "INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b" if i % 2 else "%LMQ%a",
        "INNER_MULTI_QUEUE_OFFSET": f"{i},{i // 2}" if i % 2 else f"{i}"}) for i in range(4)]
    results = _write(root, msgs)
    code = codec.java_hash("A")
    units = [(r.physical_offset, r.wrote_bytes, code) for r in results]
    _write_units(root, "%LMQ%a", 0, units)
    _write_units(root, "%LMQ%b", 0, [units[1], units[3]])
    with MessageStore.open(root, read_only=True, config=small_config(root)) as ro:
        report = ro.check()
        assert report.ok, report.problems
        assert report.units == 4 + 4 + 2
        assert any("LMQ" in note and "2" in note for note in report.notes), report.notes
    _write_units(root, "%LMQ%b", 0, [units[1], units[2]])   # record 2 is not dispatched to %LMQ%b
    with MessageStore.open(root, read_only=True, config=small_config(root)) as ro:
        problems = ro.check().problems
        assert len(problems) == 1, problems   # unit #1 points at record 2, INNER_MULTI_QUEUE_OFFSET says record 3
        assert "%LMQ%b/0#1" in problems[0].message


def test_check_does_not_compare_tags_codes_held_in_consume_queue_ext(tmp_path):
    root = tmp_path / "s"
    results = _write(root, [Message("T", b"m", tags="A") for _ in range(3)])
    units = [(r.physical_offset, r.wrote_bytes, codec.java_hash("A")) for r in results]
    units[1] = (units[1][0], units[1][1], EXT_ADDRESS)
    _write_units(root, "T", 0, units)
    with MessageStore.open(root, read_only=True, config=small_config(root)) as ro:
        report = ro.check()
        assert report.ok, report.problems
        assert any("ConsumeQueueExt" in note for note in report.notes), report.notes
        # the tag filter of the bulk reader and of getMessage keeps the ext unit's record
        rows = [r for b in ro.read_range("T", 0, 0, 3, tags={"A"}) for r in b.to_pylist()]
        assert [r["queueOffset"] for r in rows] == [0, 1, 2]
        got = ro.get_message("g", "T", 0, 0, 32, tags={"A"})
        assert [m.physical_offset for m in got.messages] == [u[0] for u in units]


DELAY_LEVELS = "2s 7s 1m"


def test_custom_message_delay_level_sets_the_schedule_tags_code(tmp_path):
    root = tmp_path / "s"
    results = _write(root, [Message("T", b"d", tags="A", delay_level=lvl) for lvl in (1, 2, 3, 9)],
                     message_delay_level=DELAY_LEVELS)
    with MessageStore.open(root, read_only=True, config=small_config(root, message_delay_level=DELAY_LEVELS)) as ro:
        got = {}
        for qid in range(3):
            for offset, _, code in ro.read_cq_units(codec.SCHEDULE_TOPIC, qid, 0, 10).tolist():
                got[offset] = (qid, code - ro.look_message_by_offset(offset).store_timestamp)
        # level 9 is clamped to the highest configured level (3 = 1m), as ScheduleMessageService does
        assert [got[r.physical_offset] for r in results] == [(0, 2000), (1, 7000), (2, 60_000), (2, 60_000)]
        assert ro.check().ok
    # opened with the default levels (a broker's store opened by path, its broker.conf elsewhere): the
    # schedule queues' units say which delays the store was written with, and check follows them
    with MessageStore.open(root, read_only=True, config=small_config(root)) as ro:
        levels = ro.effective_delay_levels()
        assert [levels[k] for k in (1, 2, 3)] == [2000, 7000, 60_000]
        assert ro.check().ok, ro.check().problems


def test_redispatch_uses_the_delays_the_store_was_written_with(tmp_path, caplog):
    """Issue 10, finding 5: a writer that re-dispatched SCHEDULE_TOPIC_XXXX records with its own
    messageDelayLevel wrote other delivery times than the broker that stored them (Java's schedule
    service then delivers early or late)."""
    root = tmp_path / "s"
    results = _write(root, [Message("T", b"d%d" % i, delay_level=2) for i in range(3)],
                     message_delay_level=DELAY_LEVELS)
    cq_file = root / "consumequeue" / codec.SCHEDULE_TOPIC / "1" / f"{0:020d}"
    data = bytearray(cq_file.read_bytes())
    data[40:60] = bytes(20)                      # the third unit lost in a crash
    cq_file.write_bytes(bytes(data))
    (root / "abort").touch()
    with caplog.at_level("WARNING"), MessageStore.open(root, config=small_config(root)) as st:
        assert st.max_offset(codec.SCHEDULE_TOPIC, 1) == 3
        offset, _, code = st.read_cq_units(codec.SCHEDULE_TOPIC, 1, 2, 3).tolist()[0]
        assert offset == results[2].physical_offset
        assert code - st.look_message_by_offset(offset).store_timestamp == 7000   # not the default 5 s
        assert st.check().ok
    assert "level 2 was stored with a delay of 7000 ms" in caplog.text


def test_schedule_tags_code_java_rules():
    """``ScheduleMessageService.computeDeliverTimestamp``: +1000 ms for a level without a delay;
    level clamped to ``maxDelayLevel``; a level <= 0 keeps the TAGS hash."""
    levels = codec.parse_delay_levels(DELAY_LEVELS)
    assert levels == (2000, 7000, 60_000)
    sched = codec.SCHEDULE_TOPIC
    assert codec.cq_tags_code(sched, {"DELAY": "2"}, 100, delay_levels=levels) == 7100
    assert codec.cq_tags_code(sched, {"DELAY": "+3"}, 100, delay_levels=levels) == 60_100
    assert codec.cq_tags_code(sched, {"DELAY": "40"}, 100, delay_levels=levels) == 60_100
    assert codec.cq_tags_code(sched, {"DELAY": "0", "TAGS": "A"}, 100, delay_levels=levels) == codec.java_hash("A")
    assert codec.cq_tags_code(sched, {"DELAY": "-2"}, 100, delay_levels=levels) == 0
    assert codec.cq_tags_code(sched, {"DELAY": "2"}, 100, delay_levels={1: 2000, 3: 9000}) == 1100
