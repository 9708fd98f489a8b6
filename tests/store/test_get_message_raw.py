"""``get_message_raw`` (the broker's PULL_MESSAGE read): the numpy path over consume-queue units against
the per-record loop of ``DefaultMessageStore.getMessage`` it replaces - same status, nextBeginOffset and
record bytes for interleaved queues, tag filters, range ends, commit-log file ends and the transfer
limits (maxMsgNums, maxTransferBytes/CountOnMessageInMemory, cut where ``isTheBatchFull`` cuts: before
the tag check, with the size of the unit at hand); records back to back in the commit log come as one
segment; a per-message ``record_filter`` and units below the commit log's min take the per-record loop."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from rocketstream import codec
from rocketstream.errors import CorruptStoreError
from rocketstream.store import MessageStore, StoreConfig
from rocketstream.store.read import queries as queries_module
from rocketstream.store.write.messages import GetMessageStatus

TAGS = ["A", "B", None]


def _code(tag: str) -> int:
    return codec.tags_code(tag)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Topic I: 3 queues written interleaved (single puts and batches of 1-7, sizes 1-900 B, tags A/B/none),
    small commit-log files (64 KiB: records end files often) and small CQ files (50 units); topic O: one
    queue, 150 messages of 100 B put between those of I; topic C: one queue, 120 messages put one by one
    after all others (back to back in the commit log but at file ends)."""
    root = tmp_path_factory.mktemp("raw")
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 << 10,
                      mapped_file_size_consume_queue=50 * 20, compress_msg_body_over=1 << 30)
    rnd = random.Random(12)
    s = MessageStore.open(root, config=cfg)
    s.create_topic("I", 3)
    s.create_topic("O", 1)
    for i in range(250):
        n = rnd.choice([1, 1, 3, 7])
        bodies = [bytes([i % 251]) * rnd.randint(1, 900) for _ in range(n)]
        tags = [rnd.choice(TAGS) for _ in range(n)]
        s.put_batch("I", rnd.randrange(3), bodies, tags=tags)
        if i < 150:
            s.put_batch("O", 0, [b"o" * 100], tags="A")
    s.create_topic("C", 1)
    for i in range(120):
        s.put_batch("C", 0, [bytes([i]) * 700], tags="A")
    yield s
    s.close()


def _with_limits(store, count: int, nbytes: int):
    q = store._queries
    q.config = dataclasses.replace(q.config, max_transfer_count_on_message_in_memory=count,
                                   max_transfer_bytes_on_message_in_memory=nbytes)


def _queue_offsets(body: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(body):
        total = codec.INT32.unpack_from(body, pos)[0]
        out.append(codec.INT64.unpack_from(body, pos + codec.POS_QUEUE_OFFSET)[0])
        pos += total
    return out


def _same(store, topic, q, offset, nums, codes):
    """get_message_raw, its numpy path forced, and the per-record loop agree; (numpy result, body)."""
    queries = store._queries
    cq = queries._queue(topic, q)
    limit = max(queries.config.max_filter_message_bytes, nums * 20) // 20
    end = min(cq.file_end_index(offset), cq.max_offset(), offset + limit)
    ref = queries._get_raw_per_record(cq, offset, end, nums, codes, None)
    vec = queries._get_raw_vectorized(cq, offset, end, nums, codes)
    assert vec is not None
    for got in (vec, queries.get_message_raw(topic, q, offset, nums, codes)):
        assert (got.status, got.next_begin_offset, got.message_count, got.total_bytes) == \
            (ref.status, ref.next_begin_offset, ref.message_count, ref.total_bytes), (topic, q, offset, nums, codes)
        assert b"".join(got.buffers) == b"".join(ref.buffers)
    body = b"".join(vec.buffers)
    assert len(body) == vec.total_bytes
    return vec, body


@pytest.mark.parametrize("limits", [(32, 262144), (5, 2500)])
def test_numpy_path_equals_the_per_record_loop(store, limits):
    _with_limits(store, *limits)
    rnd = random.Random(limits[0])
    for codes in (None, {_code("A"), _code("B")}, {_code("Z")}):
        for q in range(3):
            hi = store.max_offset("I", q)
            offsets = sorted({0, hi - 1, 49, 50, 51, *(rnd.randrange(hi) for _ in range(6))})
            for offset in offsets:
                for nums in (1, 32, 1024):
                    got, body = _same(store, "I", q, offset, nums, codes)
                    assert got.status in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE)
                    qoffs = _queue_offsets(body)
                    assert qoffs == sorted(qoffs) and all(offset <= o < got.next_begin_offset for o in qoffs)
                    assert len(qoffs) == got.message_count <= min(nums, limits[0])
                    # the range never passes the end of the consume-queue file holding ``offset`` (rollNextFile)
                    assert got.next_begin_offset <= min(hi, offset - offset % 50 + 50)


def test_adjacent_records_come_as_one_segment(store):
    _with_limits(store, 4096, 8 << 20)
    queries = store._queries
    # a one-queue topic written alone: one segment per commit-log file touched
    got, body = _same(store, "C", 0, 0, 1024, None)
    assert _queue_offsets(body) == list(range(50)) and got.message_count == 50
    cq = queries._queue("C", 0)
    phys = cq.raw_units(0, 50)["offset"].astype(np.int64)
    assert len(got.buffers) == len(np.unique(phys // (64 << 10))) < 4
    # interleaved queues: one segment per run of records back to back in one file
    for q in range(3):
        res = queries.get_message_raw("I", q, 0, 1024, None)
        units = queries._queue("I", q).raw_units(0, res.next_begin_offset)
        phys, sizes = units["offset"].astype(np.int64), units["size"].astype(np.int64)
        file_of = phys // (64 << 10)
        runs = 1 + int(np.count_nonzero((phys[1:] != phys[:-1] + sizes[:-1]) | (file_of[1:] != file_of[:-1])))
        assert len(res.buffers) == runs < res.message_count, q


def test_batch_full_is_checked_before_the_tag_with_the_units_own_size(store):
    """isTheBatchFull runs before the tag check: a unit of another tag that would not fit ends the batch."""
    queries = store._queries
    cq = queries._queue("I", 0)
    hi = cq.max_offset()
    units = cq.raw_units(0, min(hi, 50))
    a = _code("A")
    low = (units["tags_code"].astype(np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    first_a = int(np.argmax(low == a))
    later = [i for i in range(first_a + 1, len(units)) if low[i] != a]
    assert later, "the fixture has a unit of another tag after an A"
    j = later[0]
    if any(low[first_a + 1:j] == a):
        pytest.skip("the first non-A unit after an A is preceded by more A units")
    size_a, size_j = int(units["size"][first_a]), int(units["size"][j])
    _with_limits(store, 4096, size_a + size_j - 1)   # taking A, the non-A unit j would not fit
    got, body = _same(store, "I", 0, first_a, 1024, {a})
    assert got.message_count == 1 and got.next_begin_offset == j
    _with_limits(store, 4096, size_a + size_j)        # exactly fits: the scan goes on past j
    got, _ = _same(store, "I", 0, first_a, 1024, {a})
    assert got.next_begin_offset > j


def test_cuts_at_max_msg_nums_and_count_and_byte_limits(store):
    _with_limits(store, 4096, 8 << 20)
    got, body = _same(store, "O", 0, 10, 7, None)
    assert _queue_offsets(body) == list(range(10, 17)) and got.next_begin_offset == 17
    _with_limits(store, 4, 8 << 20)   # maxTransferCountOnMessageInMemory
    got, body = _same(store, "O", 0, 10, 7, None)
    assert _queue_offsets(body) == list(range(10, 14)) and got.next_begin_offset == 14
    record = got.total_bytes // 4     # O's records all have one size
    for limit, taken in ((3 * record, 3), (4 * record - 1, 3), (record - 1, 1)):   # the first always goes
        _with_limits(store, 4096, limit)
        got, body = _same(store, "O", 0, 10, 1024, None)
        assert got.message_count == taken and got.next_begin_offset == 10 + taken, limit


def test_record_filter_and_removed_records_take_the_per_record_loop(store, monkeypatch):
    _with_limits(store, 32, 262144)
    queries = store._queries
    seen = []

    def even(record: memoryview) -> bool:
        qoff = codec.INT64.unpack_from(record, codec.POS_QUEUE_OFFSET)[0]
        seen.append(qoff)
        return qoff % 2 == 0

    res = queries.get_message_raw("O", 0, 0, 10, None, record_filter=even)
    body = b"".join(res.buffers)
    assert _queue_offsets(body) == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18] and res.message_count == 10
    assert seen == list(range(19)) and res.next_begin_offset == 19
    # units below the commit log's min (a file being removed): MESSAGE_WAS_REMOVING from the per-record loop
    cq = queries._queue("O", 0)
    cut = int(cq.raw_units(5, 6)["offset"][0])
    assert queries._get_raw_vectorized(cq, 0, 50, 32, None) is not None
    monkeypatch.setattr(store.commit_log, "min_offset", lambda: cut)
    assert queries._get_raw_vectorized(cq, 0, 50, 32, None) is None
    res = queries.get_message_raw("O", 0, 0, 32, None)
    body = b"".join(res.buffers)
    assert res.status == GetMessageStatus.FOUND and _queue_offsets(body)[0] >= 5


def test_a_unit_that_disagrees_with_its_record_is_an_error_naming_the_offset(store, monkeypatch):
    queries = store._queries
    cq = queries._queue("O", 0)
    units = cq.raw_units(0, 50).copy()
    units["size"][3] += 1
    monkeypatch.setattr(cq, "raw_units", lambda a, b: units[a:b])
    # the per-record loops read the units as Python ints (queries_module._unit_values)
    monkeypatch.setattr(queries_module, "_unit_values", lambda _cq, a, b: units[a:b].tolist())
    with pytest.raises(CorruptStoreError, match=r"does not match its consume-queue unit \(size \d+, offset "
                                                rf"{int(units['offset'][3])}\)"):
        queries._get_raw_vectorized(cq, 0, 50, 32, None)
    with pytest.raises(CorruptStoreError, match="does not match its consume-queue unit"):
        queries._get_raw_per_record(cq, 0, 50, 32, None, None)
    with pytest.raises(CorruptStoreError, match="does not match its consume-queue unit"):
        queries._get_raw_all_small(cq, 0, 50, 32)
    with pytest.raises(CorruptStoreError, match="does not match its consume-queue unit"):
        queries.get_message_raw("O", 0, 0, 32)


def test_a_store_the_real_broker_wrote_pulls_as_its_java_client_read_it(real_stores, copy_of):
    """Over a copy of a store written by the real 4.9.8 broker: every queue pulled from its min with
    get_message_raw (numpy path and per-record loop agreeing) yields exactly the records the Java client
    read there (oracle: queue offset, commit-log offset, size, body hash)."""
    import hashlib

    from rocketstream.client.pull_decode import decode_pull_body

    real = real_stores["clean"]
    _, oracle = real.oracle_records()
    want = {(m["topic"], m["queueId"], m["queueOffset"]): (m["commitLogOffset"], m["storeSize"], m["bodySha256"])
            for m in oracle}
    got: dict[tuple[str, int, int], tuple[int, int, str]] = {}
    with MessageStore.open(copy_of(real.root)) as s:
        _with_limits(s, 1024, 8 << 20)
        for topic in s.topics():
            for q in s.queue_ids(topic):
                offset, hi = s.min_offset(topic, q), s.max_offset(topic, q)
                while offset < hi:
                    res, body = _same(s, topic, q, offset, 1024, None)
                    assert res.status is GetMessageStatus.FOUND, (topic, q, offset, res.status)
                    for m in decode_pull_body(body):
                        got[(m.topic, m.queue_id, m.queue_offset)] = (
                            m.commit_log_offset, m.store_size, hashlib.sha256(m.body).hexdigest())
                    offset = res.next_begin_offset
    assert want and got == want
