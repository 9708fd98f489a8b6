"""A broker batch body stored as a whole (``MessageStore.put_raw_batch``, put_raw.py) against the general
path (broker/send.py ``batch_messages`` -> ``MessageStore.put_messages``): for random batches - inner
properties in and out of re-encoded form, names shared or not, batch properties the messages have too -
either the raw path declines (None) or both store the same commit-log bytes, consume-queue units and
results."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rocketstream import codec
from rocketstream.broker.send import batch_messages
from rocketstream.codec import HostAddress
from rocketstream.store import message_store as ms
from rocketstream.store.message_store import MessageStore
from rocketstream.store.write import put_raw

NOW = 1_700_000_000_123
NAMES = ["UNIQ_KEY", "KEYS", "TAGS", "WAIT", "CLUSTER", "a", "bb", "ü"] * 3 + ["DELAY"]
TEXT = st.text(alphabet=st.sampled_from("abcXYZ 09_-ü€"), min_size=0, max_size=6) \
    | st.text(alphabet=st.sampled_from("ab\x01"), min_size=0, max_size=3)


def _encode(pairs: list[tuple[str, str]], *, trailing: bool = True) -> bytes:
    text = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
    if not trailing and text:
        text = text[:-1]
    return text.encode("utf-8")


@st.composite
def props_bytes(draw: st.DrawFn, names: list[str] | None) -> bytes:
    """One inner properties string: usually well-formed pairs (with the given names, when the batch is
    uniform), sometimes with a flaw the re-encoding would change, sometimes raw bytes."""
    kind = draw(st.sampled_from(["pairs"] * 12 + ["flawed", "raw"]))
    if kind == "raw":
        return draw(st.binary(max_size=24).map(lambda b: b.replace(b"\x00", b"\x01")))
    if names is None:
        names = draw(st.lists(st.sampled_from(NAMES), max_size=5, unique=True))
    pairs = [(n, draw(TEXT.filter(lambda v: v != "") if n != "UNIQ_KEY" else
                      st.sampled_from([codec.new_uniq_key(), "U1"]))) for n in names]
    if n_delay := [p for p in pairs if p[0] == "DELAY"]:
        pairs[pairs.index(n_delay[0])] = ("DELAY", draw(st.sampled_from(["0", "2"])))
    if kind == "flawed":
        flaw = draw(st.sampled_from(["dup", "empty", "notrail", "latin1"]))
        if flaw == "dup" and pairs:
            pairs.append((pairs[0][0], "x"))
        elif flaw == "empty":
            pairs.append(("e", ""))
        elif flaw == "notrail":
            return _encode(pairs, trailing=False)
        elif flaw == "latin1":
            return _encode(pairs) + b"z\x01\xe9\x02"
    return _encode(pairs)


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, dict[str, str], int, HostAddress]:
    uniform = draw(st.booleans())
    names = draw(st.lists(st.sampled_from(NAMES), max_size=5, unique=True)) if uniform else None
    n = draw(st.integers(1, 6))
    entries = [(draw(st.integers(-(2**31), 2**31 - 1)), draw(st.binary(max_size=40)), draw(props_bytes(names)))
               for _ in range(n)]
    body = b"".join(codec.record._BATCH_HEAD.pack(20 + len(b) + 2 + len(p), 0, 0, f, len(b)) + b
                    + len(p).to_bytes(2, "big") + p for f, b, p in entries)
    header = draw(st.lists(st.tuples(st.sampled_from(["WAIT"] * 4 + ["CLUSTER", "x", "TAGS"]),
                                     st.sampled_from(["true"] * 4 + ["false", "DefaultCluster", "v"])), max_size=3))
    batch_props = dict(header)
    batch_props["CLUSTER"] = draw(st.sampled_from(["DefaultCluster", "v"]))
    sys_flag = draw(st.sampled_from([0, codec.FLAG_MULTI_TAGS, 0x40]))
    host = draw(st.sampled_from([HostAddress("10.1.2.3", 40000), HostAddress("::1", 5)]))
    return body, batch_props, sys_flag, host


@pytest.fixture(scope="module")
def now_fixed():
    mp = pytest.MonkeyPatch()
    mp.setattr(ms, "_now_ms", lambda: NOW)
    yield
    mp.undo()


# tmpfs when there is one: a store's open and close fsync its lock and metadata files, which on a busy disk
# cost more than the example itself (300 examples, two stores each); the bytes compared are the same
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@contextlib.contextmanager
def two_stores() -> Iterator[tuple[MessageStore, MessageStore]]:
    """A fresh pair per example: a failed example leaves nothing behind for the next one."""
    with tempfile.TemporaryDirectory(dir=SCRATCH, prefix="rocketstream-put-raw-") as tmp:
        a = MessageStore.open(Path(tmp) / "raw", create=True)
        b = MessageStore.open(Path(tmp) / "general", create=True)
        try:
            yield a, b
        finally:
            a.close()
            b.close()


def _cl_bytes(store: MessageStore, start: int, end: int) -> bytes:
    base, arr = store.commit_log.buffer_for(start)
    return arr[start - base:end - base].tobytes()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches())
def test_raw_batch_stores_what_the_general_path_stores(now_fixed, batch):
    with two_stores() as (raw_store, general_store):
        _compare(raw_store, general_store, *batch)


def _compare(raw_store: MessageStore, general_store: MessageStore, body: bytes, batch_props: dict[str, str],
             sys_flag: int, host: HostAddress, note: Callable[[str], None] = event) -> None:
    kw = dict(sys_flag=sys_flag, born_timestamp=NOW - 5, born_host=host, reconsume_times=0)
    fast = raw_store.put_raw_batch("TopicRaw", 1, body, batch_properties=batch_props, **kw)
    if fast is None:   # the general path decides (and may refuse, or fail on a bad DELAY as 4.9.8 does)
        note("declined")
        return
    note("taken whole")
    msgs = batch_messages("TopicRaw", body, batch_props, **kw)
    assert not isinstance(msgs, str), msgs
    general = general_store.put_messages(msgs, 1)
    assert general.status is fast.status is ms.PutMessageStatus.PUT_OK, general.reason
    assert (fast.physical_offset, fast.wrote_bytes, fast.queue_offset, fast.count) == \
        (general.physical_offset, general.wrote_bytes, general.queue_offset, general.count)
    assert fast.msg_ids == general.msg_ids
    assert fast.offset_msg_ids == general.offset_msg_ids
    end = fast.physical_offset + fast.wrote_bytes
    assert _cl_bytes(raw_store, fast.physical_offset, end) == _cl_bytes(general_store, general.physical_offset, end)
    first = fast.queue_offset
    units_a = raw_store.read_cq_units("TopicRaw", 1, first, first + fast.count)
    units_b = general_store.read_cq_units("TopicRaw", 1, first, first + fast.count)
    assert units_a.tobytes() == units_b.tobytes()
    assert _index_bytes(raw_store) == _index_bytes(general_store)


def _index_bytes(store: MessageStore) -> bytes:
    """The current index file's header and entries (the slot table is 20 MB: its effect shows in the
    entries' previous-entry links)."""
    f = store.index.current if store.index is not None else None
    if f is None:
        return b""
    start = f.geometry.entry_base
    return bytes(f.mm[:40]) + bytes(f.mm[start:start + (f.index_count + 1) * 20])


def test_a_java_client_batch_takes_the_raw_path(now_fixed):
    """What the 4.9.8 producer sends (UNIQ_KEY, WAIT, TAGS, KEYS per message; WAIT in the header) is
    taken whole, uniform names or not."""
    with two_stores() as (raw_store, general_store):
        _java_batches(raw_store, general_store)


def _java_batches(raw_store: MessageStore, general_store: MessageStore) -> None:
    # trailing False: the 4.9.8 client's own encoding (MessageDecoder.messageProperties2String drops the last
    # \x02, spec/rocketmq-store-format.md 1.6), which the raw path once declined
    for names, trailing in ((["KEYS", "UNIQ_KEY", "WAIT", "TAGS"], True), (None, True),
                            (["KEYS", "UNIQ_KEY", "WAIT", "TAGS"], False), (None, False)):
        entries = []
        for i in range(8):
            props = {"KEYS": f"k{i}", "UNIQ_KEY": codec.new_uniq_key(), "WAIT": "true", "TAGS": "TagA"}
            if names is None and i % 2:
                del props["KEYS"]
            entries.append((0, b"body%d" % i, props))
        body = b"".join(codec.record._BATCH_HEAD.pack(20 + len(b) + 2 + len(p), 0, 0, f, len(b)) + b
                        + len(p).to_bytes(2, "big") + p
                        for f, b, p in ((f, b, _encode(list(d.items()), trailing=trailing)) for f, b, d in entries))
        if trailing:
            assert body == codec.encode_batch_body(entries)
        batch_props = {"WAIT": "true", "CLUSTER": "DefaultCluster"}
        assert put_raw.build_raw_batch("TopicRaw", 2, body, batch_properties=batch_props, sys_flag=0,
                                       born_timestamp=NOW, born_host=HostAddress("10.0.0.1", 1),
                                       reconsume_times=0, store_host=raw_store.config.store_host,
                                       max_message_size=1 << 20) is not None
        kw = dict(sys_flag=0, born_timestamp=NOW, born_host=HostAddress("10.0.0.1", 1), reconsume_times=0)
        fast = raw_store.put_raw_batch("TopicRaw", 2, body, batch_properties=batch_props, **kw)
        msgs = batch_messages("TopicRaw", body, batch_props, **kw)
        assert not isinstance(msgs, str)
        general = general_store.put_messages(msgs, 2)
        assert fast is not None and fast.ok and general.ok
        end = fast.physical_offset + fast.wrote_bytes
        assert _cl_bytes(raw_store, fast.physical_offset, end) == _cl_bytes(general_store, general.physical_offset,
                                                                           end)


def test_strings_of_other_pair_counts_are_not_read_as_one_uniform_batch(now_fixed):
    """Three strings holding 1, 0 and 2 pairs of one name hold 3 pairs between them, each "the same names":
    read as a uniform batch the last message kept both pairs, where the general path keeps the last value
    of the name (a dict) - the raw path must decline it or store the same bytes."""
    entries = [(0, b"b0", b"a\x01x\x02"), (0, b"b1", b""), (0, b"b2", b"a\x01y\x02a\x01z\x02")]
    body = b"".join(codec.record._BATCH_HEAD.pack(20 + len(b) + 2 + len(p), 0, 0, f, len(b)) + b
                    + len(p).to_bytes(2, "big") + p for f, b, p in entries)
    with two_stores() as (raw_store, general_store):
        _compare(raw_store, general_store, body, {"WAIT": "true", "CLUSTER": "c"}, 0, HostAddress("10.1.2.3", 4),
                 note=lambda _: None)
