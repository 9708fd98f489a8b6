"""The vectorized pull-body decoder gives exactly what the per-record decoder gives, and the same errors;
MessageExt's lazily decoded properties behave like the decoded dict."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstream.client.api import decode_messages, process_pull_result
from rocketstream.client.common import LAZY_FIELDS, MessageExt, PullResult, PullStatus
from rocketstream.client.pull_decode import decode_pull_body, process_pull_result_fast
from rocketstream.client.subscription import SubscriptionData
from rocketstream.codec import (
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    MAGIC_V1,
    MAGIC_V2,
    compress_body,
    encode_properties,
    encode_record,
)
from rocketstream.errors import BodyError


def body_of(n: int, *, v6_every: int = 0, compress_every: int = 0, topic: str = "T") -> bytes:
    out, pos = [], 0
    for i in range(n):
        data, sys_flag = (f"body-{i}-" * (i % 7 + 1)).encode(), 0
        if compress_every and i % compress_every == 0:
            data, bits = compress_body(data * 50)
            sys_flag |= bits
        v6 = bool(v6_every) and i % v6_every == 0
        if v6:
            sys_flag |= FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6
        props = {"TAGS": "A" if i % 2 else "B", "KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}", "ü": "ß"}
        rec = encode_record(topic=topic if i % 5 else topic + "x", queue_id=i % 4, body=data, properties=props,
                            queue_offset=i, physical_offset=pos, sys_flag=sys_flag, born_timestamp=1000 + i,
                            born_host=("::1" if v6 else "10.0.0.1", 5000 + i), store_timestamp=2000 + i,
                            store_host=("fe80::2" if v6 else "127.0.0.1", 10911), reconsume_times=i % 3,
                            prepared_transaction_offset=0)
        out.append(rec)
        pos += len(rec)
    return b"".join(out)


@pytest.mark.parametrize("n", [0, 1, 10, 32, 100])
@pytest.mark.parametrize(("v6", "comp"), [(0, 0), (3, 0), (0, 4), (2, 3)])
def test_same_messages_as_the_per_record_decoder(n: int, v6: int, comp: int) -> None:
    body = body_of(n, v6_every=v6, compress_every=comp)
    assert decode_pull_body(body, broker_name="b") == decode_messages(body, broker_name="b")


def test_process_pull_result_fast_matches_api() -> None:
    body = body_of(64)
    tags = SubscriptionData.parse("A")
    a = process_pull_result(PullResult(PullStatus.FOUND, 64, 0, 64, 0, body), "b", tags)
    b = process_pull_result_fast(PullResult(PullStatus.FOUND, 64, 0, 64, 0, body), "b", tags)
    assert a == b and len(b) == 32 and {m.tags for m in b} == {"A"}
    assert b[0].properties["MIN_OFFSET"] == "0" and b[0].properties["MAX_OFFSET"] == "64"


@pytest.mark.parametrize("tags", [None, "*", SubscriptionData.parse("*"), ["A"]])
@pytest.mark.parametrize(("v6", "comp", "prepared"), [(0, 0, 0), (3, 4, 0), (0, 0, 2)])
def test_process_pull_result_fast_matches_api_without_a_tag_filter(tags: object, v6: int, comp: int,
                                                                  prepared: int) -> None:
    """Without a tag filter MIN/MAX_OFFSET are put while decoding (also on the per-record path, records with
    IPv6 hosts or compressed bodies): the same messages, properties and half-message transaction ids as
    api.process_pull_result; the body is released and the messages kept in the result."""
    body = body_of(20, v6_every=v6, compress_every=comp)
    if prepared:   # every other record a half message (TRANSACTION_PREPARED_TYPE, sysFlag 0x4)
        recs, pos = [], 0
        while pos < len(body):
            size = int.from_bytes(body[pos:pos + 4], "big")
            rec = bytearray(body[pos:pos + size])
            if len(recs) % prepared == 0:
                rec[36:40] = (int.from_bytes(rec[36:40], "big") | 0x4).to_bytes(4, "big")
            recs.append(bytes(rec))
            pos += size
        body = b"".join(recs)
    tf = SubscriptionData.parse(tags) if isinstance(tags, str) else tags
    a_res = PullResult(PullStatus.FOUND, 20, 3, 77, 0, body)
    b_res = PullResult(PullStatus.FOUND, 20, 3, 77, 0, body)
    a = process_pull_result(a_res, "b", tf)   # type: ignore[arg-type]
    b = process_pull_result_fast(b_res, "b", tf)   # type: ignore[arg-type]
    assert a == b and b_res.messages is b and b_res.body is None
    assert {(m.properties["MIN_OFFSET"], m.properties["MAX_OFFSET"]) for m in b} == {("3", "77")}
    if prepared:
        # the half messages are the B-tagged ones
        assert sum("__transactionId__" in m.properties for m in b) == (0 if tags == ["A"] else 10)
    assert process_pull_result_fast(PullResult(PullStatus.NO_NEW_MSG, 20, 3, 77, 0), "b", tf) == []   # type: ignore[arg-type]


@pytest.mark.parametrize("n", [4, 64])
def test_bad_bodies_raise_body_error_naming_the_position(n: int) -> None:
    body = bytearray(body_of(n))
    first = int.from_bytes(body[0:4], "big")
    body[first + 4:first + 8] = b"\x00\x00\x00\x01"   # second record's magic
    with pytest.raises(BodyError, match=f"byte {first}"):
        decode_pull_body(bytes(body), addr="127.0.0.1:1")
    with pytest.raises(BodyError, match="beyond the body|truncated"):
        decode_pull_body(body_of(n)[:-3])


@pytest.mark.parametrize("v6", [0, 1])
def test_bad_lengths_inside_a_record_raise_what_the_per_record_decoder_raises(v6: int) -> None:
    body = bytearray(body_of(3, v6_every=v6))
    first = int.from_bytes(body[0:4], "big")
    second = int.from_bytes(body[first:first + 4], "big")
    third = first + second
    body_len_at = third + (108 if v6 else 84)   # BODY length field
    body[body_len_at:body_len_at + 4] = (10**6).to_bytes(4, "big")
    with pytest.raises(BodyError, match=f"record at byte {third}") as fast:
        decode_pull_body(bytes(body), addr="127.0.0.1:1")
    with pytest.raises(BodyError) as slow:
        decode_messages(bytes(body), addr="127.0.0.1:1")
    assert str(fast.value) == str(slow.value) and "BODY length" in str(fast.value)


def test_a_bad_compressed_body_names_its_record() -> None:
    body = bytearray(body_of(2, compress_every=2))   # record 0 compressed
    body[84 + 4 + 2] ^= 0xFF                          # inside its zlib stream
    with pytest.raises(BodyError, match="record at byte 0"):
        decode_pull_body(bytes(body))


# --------------------------------------------------------------------------- random records (hypothesis)
_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=12)
_hosts4 = st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535))
_hosts6 = st.tuples(st.ip_addresses(v=6).map(str), st.integers(0, 65535))
_record = st.fixed_dictionaries({
    "topic": st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=40),
    "v2": st.booleans(),
    "queue_id": st.integers(0, 2**31 - 1),
    "flag": st.integers(-(2**31), 2**31 - 1),
    "queue_offset": st.integers(0, 2**62),
    "sys_flag_extra": st.sampled_from([0, 0x4, 0x8, 0xC]),   # transaction type bits
    "born_timestamp": st.integers(0, 2**62),
    "store_timestamp": st.integers(0, 2**62),
    "born_host": st.one_of(_hosts4, _hosts6),
    "store_host": st.one_of(_hosts4, _hosts6),
    "reconsume_times": st.integers(0, 2**31 - 1),
    "prepared_transaction_offset": st.integers(0, 2**62),
    "body": st.binary(max_size=300),
    "compress": st.booleans(),
    "properties": st.dictionaries(_text, _text, max_size=5),
    "raw_properties": st.one_of(st.none(), st.binary(max_size=40)),   # anything a broker may have stored
})


def _encode(recs: list[dict]) -> bytes:
    out, pos = [], 0
    for r in recs:
        body, sys_flag = r["body"], r["sys_flag_extra"]
        if r["compress"] and body:
            body, bits = compress_body(body)
            sys_flag |= bits
        props: dict[str, str] | bytes = r["properties"] if r["raw_properties"] is None else r["raw_properties"]
        rec = encode_record(topic=r["topic"], queue_id=r["queue_id"], body=body, properties=props, flag=r["flag"],
                            queue_offset=r["queue_offset"], physical_offset=pos, sys_flag=sys_flag,
                            born_timestamp=r["born_timestamp"], born_host=r["born_host"],
                            store_timestamp=r["store_timestamp"], store_host=r["store_host"],
                            reconsume_times=r["reconsume_times"],
                            prepared_transaction_offset=r["prepared_transaction_offset"],
                            magic=MAGIC_V2 if r["v2"] else (None if len(r["topic"].encode()) > 127 else MAGIC_V1))
        out.append(rec)
        pos += len(rec)
    return b"".join(out)


def _same_as_per_record(recs: list[dict]) -> None:
    body = _encode(recs)
    fast = decode_pull_body(body, broker_name="bn")
    slow = decode_messages(body, broker_name="bn")
    assert fast == slow
    assert [m.sys_flag & (FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6) for m in fast] == [
        (FLAG_BORNHOST_V6 if ":" in r["born_host"][0] else 0) | (FLAG_STOREHOST_V6 if ":" in r["store_host"][0] else 0)
        for r in recs]
    assert [m.body for m in fast] == [r["body"] for r in recs]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=st.lists(_record, min_size=1, max_size=24))
def test_random_records_decode_as_the_per_record_decoder_decodes_them(recs: list[dict]) -> None:
    _same_as_per_record(recs)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=st.lists(_record, min_size=1, max_size=64))
def test_many_random_records_decode_as_the_per_record_decoder_decodes_them(recs: list[dict]) -> None:
    _same_as_per_record(recs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=st.lists(_record, min_size=1, max_size=8), cut=st.integers(0, 10**6), flip=st.integers(0, 255))
def test_damaged_bodies_fail_or_decode_as_the_per_record_decoder(recs: list[dict], cut: int, flip: int) -> None:
    body = bytearray(_encode(recs))
    body[cut % len(body)] ^= flip or 1
    try:
        slow: list[MessageExt] | BodyError = decode_messages(bytes(body))
    except BodyError as exc:
        slow = exc
    try:
        fast: list[MessageExt] | BodyError = decode_pull_body(bytes(body))
    except BodyError as exc:
        fast = exc
    if isinstance(slow, BodyError):
        assert isinstance(fast, BodyError) and str(fast) == str(slow)
    else:
        assert fast == slow


# --------------------------------------------------------------------------- lazy properties
def _lazy(props: dict[str, str]) -> MessageExt:
    (m,) = decode_pull_body(encode_record(topic="T", queue_id=0, body=b"x", properties=props, queue_offset=0,
                                          physical_offset=0, sys_flag=0, born_timestamp=0, born_host=("1.2.3.4", 1),
                                          store_timestamp=0, store_host=("1.2.3.4", 2)))
    return m


def test_properties_put_before_the_first_access_are_kept_and_win() -> None:
    m = _lazy({"TAGS": "a", "K": "v"})
    m.put_property("K", "w")
    m.put_properties((("MIN_OFFSET", "1"), ("MAX_OFFSET", "9")))
    assert m.get_property("MAX_OFFSET") == "9" and m.get_property("K") == "w"
    assert m.properties == {"TAGS": "a", "K": "w", "MIN_OFFSET": "1", "MAX_OFFSET": "9"}
    assert m.tags == "a"
    m.put_property("X", "y")   # after decoding: straight into the dict
    m.properties["Z"] = "z"
    assert m.properties["X"] == "y" and m.properties["Z"] == "z" and m.get_property("absent") is None


def test_lazy_and_decoded_messages_compare_and_print_alike() -> None:
    props = {"TAGS": "a", "UNIQ_KEY": "ABC"}
    m = _lazy(props)
    eager = MessageExt(m.topic, m.body, dict(props), m.flag, m.queue_id, m.queue_offset, m.commit_log_offset,
                       m.sys_flag, m.born_timestamp, m.born_host, m.store_timestamp, m.store_host, m.reconsume_times,
                       m.prepared_transaction_offset, m.body_crc, m.store_size, m.broker_name)
    assert repr(m) == repr(eager) and m == eager and m.msg_id == "ABC"
    eager.properties = {}
    assert m != eager and m.properties == encode_properties_roundtrip(props)
    with pytest.raises(TypeError):
        hash(m)


def encode_properties_roundtrip(props: dict[str, str]) -> dict[str, str]:
    from rocketstream.codec import decode_properties
    return decode_properties(encode_properties(props))


def test_lazy_fields_read_as_given_and_keep_what_was_assigned_before() -> None:
    """decode_pull_body's messages leave most fields to their first read (MessageExt's docstring): each reads
    as the per-record decoder's, a field assigned before that read keeps its value, the consume path (queue
    offset, body, topic, CONSUME_START_TIME, MAX_OFFSET) reads none of them, and unknown names still raise."""
    body = body_of(3)
    (fast, second, third) = decode_pull_body(body, broker_name="bn", put=(("MAX_OFFSET", "9"),))
    (slow, slow2, _) = decode_messages(body, broker_name="bn")
    fast.put_property("CONSUME_START_TIME", "123")
    assert (fast.topic, fast.body, fast.queue_offset) == (slow.topic, slow.body, slow.queue_offset)
    assert fast.get_property("MAX_OFFSET") == "9" and fast.get_property("CONSUME_START_TIME") == "123"
    assert fast._src is not None   # none of the lazy fields was read yet
    fast.reconsume_times = 7
    fast.store_host = slow2.store_host
    assert fast.queue_id == slow.queue_id and fast._src is None
    assert fast.reconsume_times == 7 and fast.store_host is slow2.store_host
    assert (fast.born_host, fast.commit_log_offset, fast.store_size, fast.body_crc, fast.broker_name) == (
        slow.born_host, slow.commit_log_offset, slow.store_size, slow.body_crc, "bn")
    assert fast.properties == {**slow.properties, "MAX_OFFSET": "9", "CONSUME_START_TIME": "123"}
    assert second.properties["MAX_OFFSET"] == "9" and second.msg_id == slow2.msg_id
    with pytest.raises(AttributeError, match="no_such_field"):
        third.no_such_field   # type: ignore[attr-defined]   # noqa: B018
    assert third._src is not None   # an unknown name fills nothing
    third.properties = {"X": "1"}
    assert third.properties == {"X": "1"} and third.flag == 0   # assigned properties stay over the record's


def test_a_lazy_message_keeps_its_header_bytes_not_the_pull_body() -> None:
    """What a lazy message keeps for its unread fields is its own 88 header bytes (a pulled message kept by the
    listener does not keep the whole pull body alive), and every such field reads as the per-record decoder's."""
    body = body_of(5)
    msgs = decode_pull_body(body, broker_name="bn")
    slows = decode_messages(body, broker_name="bn")
    for m, slow in zip(msgs, slows, strict=True):
        _fill, head = m._src
        assert type(head) is bytes and len(head) == 88
        assert body.find(head) == slow.commit_log_offset   # body_of's records sit at their commit log offsets
        assert [getattr(m, f) for f in LAZY_FIELDS] == [getattr(slow, f) for f in LAZY_FIELDS]
        assert m._src is None


def test_a_lazy_field_read_by_another_thread_while_the_first_fills_reads_its_value() -> None:
    """Two threads reading a lazy message's fields at once (a consume thread and the client loop): the one
    that comes while the other is filling still reads the value, never an AttributeError."""
    import threading

    (m,) = decode_pull_body(body_of(1), broker_name="bn")
    (slow,) = decode_messages(body_of(1), broker_name="bn")
    fill, record = m._src
    seen: list[object] = []

    def fill_with_a_reader_in_between(rec: object) -> tuple[object, ...]:
        values = fill(rec)
        if not seen:   # the first fill: another thread reads a field before this one has set any
            seen.append(None)
            t = threading.Thread(target=lambda: seen.append(m.flag))
            t.start()
            t.join()
        return values

    m._src = (fill_with_a_reader_in_between, record)
    assert m.queue_id == slow.queue_id and seen == [None, slow.flag] and m._src is None
