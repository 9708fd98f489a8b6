"""ConsumeQueue units: layout, file crossing, idempotent re-dispatch, pre-fill, truncation, min."""

import numpy as np

from rocketstream.codec import CQ_DTYPE, encode_cq_unit
from rocketstream.store.files.consume_queue import PREFILL_SIZE, ConsumeQueue

PER_FILE = 4


def make(tmp_path, read_only=False):
    cq = ConsumeQueue(tmp_path, "T", 0, 20 * PER_FILE, read_only=read_only, check_units=lambda u: -1)
    cq.load()
    return cq


def units(*rows):
    return np.array(list(rows), dtype=CQ_DTYPE)


def seq(start, n, size=100):
    return units(*[((start + i) * size, size, i) for i in range(n)])


def test_units_are_20_byte_big_endian(tmp_path):
    cq = make(tmp_path)
    cq.put(0, units((1234, 99, -5)))
    raw = (tmp_path / "consumequeue" / "T" / "0" / ("0" * 20)).read_bytes()
    assert raw[:20] == encode_cq_unit(1234, 99, -5) and len(raw) == 80
    assert (cq.min_offset(), cq.max_offset()) == (0, 1)


def test_batch_crossing_cq_files(tmp_path):
    cq = make(tmp_path)
    cq.put(0, seq(0, 3))
    cq.put(3, seq(3, 6))
    assert cq.max_offset() == 9 and len(cq.queue.files) == 3
    assert cq.read_units(0, 9)["offset"].tolist() == [i * 100 for i in range(9)]
    ro = make(tmp_path, read_only=True)
    assert ro.max_offset() == 9


def test_redispatch_is_idempotent(tmp_path):
    cq = make(tmp_path)
    cq.put(0, seq(0, 5))
    cq.put(0, seq(0, 5))           # replay of everything
    cq.put(3, seq(3, 4))           # partial overlap: only 5, 6 are new
    assert cq.max_offset() == 7
    assert cq.read_units(0, 7)["offset"].tolist() == [i * 100 for i in range(7)]


def test_gap_is_logged_and_the_unit_appended_at_the_end(tmp_path, caplog):
    """ConsumeQueue.putMessagePositionInfo: a queue-offset gap is a warning, not damage — the unit
    goes to the queue's end and nothing is refused (a refusal used to truncate the commit log)."""
    cq = make(tmp_path)
    cq.put(0, seq(0, 2))
    with caplog.at_level("WARNING"):
        cq.put(5, seq(5, 1))
    assert "queue offset 5 but the queue ends at 2" in caplog.text
    assert cq.max_offset() == 3
    assert cq.unit(2) == (500, 100, 0)


def test_first_unit_at_nonzero_offset_prefills(tmp_path):
    cq = make(tmp_path)
    cq.put(6, seq(6, 1))
    f = cq.queue.files[0]
    assert f.file_from_offset == 80            # file of offset 6 (4 units per file)
    raw = cq.raw_units(4, 7)
    assert raw["size"].tolist() == [PREFILL_SIZE, PREFILL_SIZE, 100]
    assert (cq.min_offset(), cq.max_offset()) == (6, 7)
    cq.correct_min_offset(0)
    assert cq.min_offset() == 6                # pre-fill units never become the minimum


def test_recover_stops_at_first_invalid_unit(tmp_path):
    cq = make(tmp_path)
    cq.put(0, seq(0, 6))
    f = cq.queue.files[-1]
    f.mm[20:40] = bytes(20)                    # unit 5 lost
    again = make(tmp_path)
    again.recover()
    assert again.max_offset() == 5 and again.max_physic_offset == 500


def test_truncate_dirty_logic_files(tmp_path):
    cq = make(tmp_path)
    cq.put(0, seq(0, 10))
    cq.truncate_dirty_logic_files(400)         # records from 400 on are gone
    assert cq.max_offset() == 4 and len(cq.queue.files) == 1
    assert cq.max_physic_offset == 400
    cq.truncate_dirty_logic_files(0)
    assert cq.max_offset() == 0


def test_correct_min_offset(tmp_path):
    cq = make(tmp_path)
    cq.put(0, seq(0, 10))
    cq.correct_min_offset(250)
    assert cq.min_offset() == 3
    cq.correct_min_offset(10**6)               # only the first file is scanned (4.x): unchanged
    assert cq.min_offset() == 3
