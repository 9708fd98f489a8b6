"""Put path: rolling, blank records, batches, queue offsets, broker-side message rewrites."""

import struct
import zlib

import pytest

from rocketstream import codec
from rocketstream.store import Message, PutMessageStatus
from storeutil import CL_SIZE, open_small, sized


def blank_at(store, offset):
    fr, arr = store.commit_log.buffer_for(offset)
    pos = offset - fr
    return struct.unpack(">ii", arr[pos:pos + 8].tobytes())


def test_record_leaving_exactly_8_bytes_stays_then_blank_of_8(tmp_path):
    with open_small(tmp_path / "s") as st:
        r1 = st.put_message(sized(CL_SIZE - 8), 0)
        assert r1.ok and r1.physical_offset == 0 and r1.wrote_bytes == CL_SIZE - 8
        r2 = st.put_message(sized(200), 0)
        assert r2.physical_offset == CL_SIZE
        assert blank_at(st, CL_SIZE - 8) == (8, codec.BLANK_MAGIC)
        first = [m.body for m in st.get_message("g", "T", 0, 0, 10).messages][:1]
        assert first == [b"x" * len(sized(CL_SIZE - 8).body)]


@pytest.mark.parametrize("left", [0, 1, 7])
def test_record_leaving_less_than_8_bytes_moves_to_next_file(tmp_path, left):
    with open_small(tmp_path / "s") as st:
        st.put_message(sized(1000), 0)
        r = st.put_message(sized(CL_SIZE - 1000 - left), 0)
        assert r.ok and r.physical_offset == CL_SIZE
        assert blank_at(st, 1000) == (CL_SIZE - 1000, codec.BLANK_MAGIC)
        assert r.queue_offset == 1
        assert st.get_message("g", "T", 0, 1, 1).messages[0].physical_offset == CL_SIZE


def test_record_larger_than_a_file_is_illegal(tmp_path):
    with open_small(tmp_path / "s") as st:
        r = st.put_message(sized(CL_SIZE - 7), 0)
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "fit" in r.reason
        assert st.max_offset("T", 0) == 0


def test_batch_crossing_a_file_boundary_moves_as_a_whole(tmp_path):
    with open_small(tmp_path / "s") as st:
        st.put_message(sized(3000), 0)
        r = st.put_messages([sized(300) for _ in range(4)], 0)
        assert r.ok and r.count == 4 and r.physical_offset == CL_SIZE and r.queue_offset == 1
        assert r.wrote_bytes == 1200
        assert blank_at(st, 3000) == (CL_SIZE - 3000, codec.BLANK_MAGIC)
        offs = [m.physical_offset for m in st.get_message("g", "T", 0, 1, 10).messages]
        assert offs == [CL_SIZE, CL_SIZE + 300, CL_SIZE + 600, CL_SIZE + 900]
        assert [m.queue_offset for m in st.get_message("g", "T", 0, 0, 10).messages] == [0, 1, 2, 3, 4]


def test_batch_that_exactly_leaves_8_bytes_stays(tmp_path):
    with open_small(tmp_path / "s") as st:
        st.put_message(sized(200), 0)
        r = st.put_messages([sized(972)] * 4, 0)
        assert r.physical_offset == 200 and st.commit_log_max_offset() == CL_SIZE - 8


def test_batch_rules(tmp_path):
    with open_small(tmp_path / "s", compress_msg_body_over=100) as st:
        assert st.put_messages([], 0).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert st.put_messages([Message("A", b"1"), Message("B", b"2")], 0).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert st.put_messages([Message("A", b"1", delay_level=2)], 0).status is PutMessageStatus.MESSAGE_ILLEGAL
        big = Message("A", b"z" * 3000)
        r = st.put_messages([big], 0)
        assert r.ok   # batches are never compressed
        assert st.look_message_by_offset(r.physical_offset).sys_flag & codec.FLAG_COMPRESSED == 0


def test_queue_offsets_per_topic_queue(tmp_path):
    with open_small(tmp_path / "s") as st:
        got = [st.put_message(Message(t, b"b"), q).queue_offset for t, q in
               [("A", 0), ("A", 1), ("A", 0), ("B", 0), ("A", 0)]]
        assert got == [0, 0, 1, 0, 2]
    with open_small(tmp_path / "s") as st:   # rebuilt from the consume queues at start-up
        assert st.put_message(Message("A", b"b"), 0).queue_offset == 3


def test_round_robin_queue_selection_and_topic_registration(tmp_path):
    with open_small(tmp_path / "s") as st:
        qs = [st.put_message(Message("RR", b"b")).queue_offset for _ in range(8)]
        assert qs == [0, 0, 0, 0, 1, 1, 1, 1]
        assert st.queue_ids("RR") == [0, 1, 2, 3]
        st.create_topic("Wide", 8)
        assert st.queue_ids("Wide") == list(range(8))


def test_uniq_key_wait_tags_keys_properties(tmp_path):
    with open_small(tmp_path / "s") as st:
        r = st.put_message(Message("T", b"b", tags="TagA", keys=["k1", "k2"], properties={"p": "v"}), 0)
        rec = st.look_message_by_offset(r.physical_offset)
        assert rec.properties["WAIT"] == "true" and rec.tags == "TagA" and rec.keys == "k1 k2"
        assert rec.uniq_key == r.msg_ids[0] and len(r.msg_ids[0]) == 32
        assert rec.properties["p"] == "v"
        assert r.offset_msg_ids == [codec.offset_msg_id(("127.0.0.1", 10911), r.physical_offset)]
        u = st.read_cq_units("T", 0, 0, 1)[0]
        assert int(u["tags_code"]) == codec.java_hash("TagA")
        r2 = st.put_message(Message("T", b"b", properties={"UNIQ_KEY": "MINE"}), 0)
        assert r2.msg_ids == ["MINE"]


def test_large_single_bodies_are_zlib_compressed(tmp_path):
    with open_small(tmp_path / "s", compress_msg_body_over=100) as st:
        body = b"abc" * 200
        r = st.put_message(Message("T", body), 0)
        rec = st.look_message_by_offset(r.physical_offset)
        assert rec.sys_flag & codec.FLAG_COMPRESSED
        assert zlib.decompress(rec.body) == body and rec.uncompressed_body() == body
        small = st.look_message_by_offset(st.put_message(Message("T", b"abc"), 0).physical_offset)
        assert small.sys_flag & codec.FLAG_COMPRESSED == 0


def test_prepared_and_rollback_are_stored_but_not_dispatched(tmp_path):
    with open_small(tmp_path / "s") as st:
        st.put_message(Message("T", b"n0"), 0)
        r = st.put_message(Message("T", b"half", sys_flag=codec.TRANSACTION_PREPARED), 0)
        rb = st.put_message(Message("T", b"rb", sys_flag=codec.TRANSACTION_ROLLBACK), 0)
        c = st.put_message(Message("T", b"commit", sys_flag=codec.TRANSACTION_COMMIT), 0)
        assert r.ok and r.queue_offset == 0 and rb.queue_offset == 0
        assert st.look_message_by_offset(r.physical_offset).queue_offset == 0
        assert c.queue_offset == 1
        assert st.max_offset("T", 0) == 2
        assert [m.body for m in st.get_message("g", "T", 0, 0, 10).messages] == [b"n0", b"commit"]
        assert st.check().ok


def test_delay_level_rewrites_to_schedule_topic(tmp_path):
    with open_small(tmp_path / "s") as st:
        r = st.put_message(Message("T", b"later", delay_level=3), 2)
        rec = st.look_message_by_offset(r.physical_offset)
        assert rec.topic == codec.SCHEDULE_TOPIC and rec.queue_id == 2
        assert rec.properties["REAL_TOPIC"] == "T" and rec.properties["REAL_QID"] == "2"
        assert rec.properties["DELAY"] == "3"
        u = st.read_cq_units(codec.SCHEDULE_TOPIC, 2, 0, 1)[0]
        assert int(u["tags_code"]) == rec.store_timestamp + 10_000
        r = st.put_message(Message("T", b"clamped", delay_level=99), 0)
        assert st.look_message_by_offset(r.physical_offset).queue_id == 17
        assert st.max_offset("T", 2) == 0
        assert st.check().ok


def test_store_timestamps_never_decrease(tmp_path, monkeypatch):
    import rocketstream.store.message_store as ms

    clock = iter([1000, 2000, 1500, 3000])
    monkeypatch.setattr(ms, "_now_ms", lambda: next(clock))
    with open_small(tmp_path / "s") as st:
        ts = [st.put_message(Message("T", b"b"), 0).store_timestamp for _ in range(4)]
        assert ts == [1000, 2000, 2000, 3000]


@pytest.mark.parametrize("msg,status", [
    (Message("", b"b"), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("bad/topic", b"b"), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("T" * 128, b"b"), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("T", b"b", properties={"big": "v" * 40000}), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED),
    (Message("T", b"b", properties={"a\x01": "v"}), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("T", b"b", flag=2**31), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("T", b"b", sys_flag=0x10), PutMessageStatus.MESSAGE_ILLEGAL),
])
def test_illegal_messages_get_a_status_not_an_exception(tmp_path, msg, status):
    with open_small(tmp_path / "s", max_message_size=1000) as st:
        r = st.put_message(msg, 0)
        assert r.status is status and r.reason
        assert st.commit_log_max_offset() == 0


def test_body_over_max_message_size_is_illegal(tmp_path):
    with open_small(tmp_path / "s", max_message_size=100) as st:
        assert st.put_message(Message("T", b"x" * 101), 0).status is PutMessageStatus.MESSAGE_ILLEGAL


def test_sync_flush_moves_checkpoint(tmp_path):
    with open_small(tmp_path / "s", flush_disk_type="SYNC_FLUSH") as st:
        r = st.put_message(Message("T", b"b"), 0)
        assert st.checkpoint.physic_msg_timestamp == r.store_timestamp


def test_writes_into_read_only_store_raise(tmp_path):
    from rocketstream.errors import ReadOnlyStoreError
    from rocketstream.store import MessageStore

    open_small(tmp_path / "s").close()
    with MessageStore.open(tmp_path / "s", read_only=True) as ro:
        with pytest.raises(ReadOnlyStoreError):
            ro.put_message(Message("T", b"b"), 0)
        with pytest.raises(ReadOnlyStoreError):
            ro.delete_expired_files()
