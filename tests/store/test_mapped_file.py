import os

import pytest

from rocketstream.errors import CorruptStoreError
from rocketstream.store.files.mapped_file import MappedFileQueue, file_name


def test_file_names_are_20_digit_offsets():
    assert file_name(0) == "00000000000000000000"
    assert file_name(1073741824) == "00000000001073741824"


def test_new_files_have_full_length_and_no_tmp_left(tmp_path):
    q = MappedFileQueue(tmp_path, 1024, writable=True)
    mf = q.last_file_for(0)
    assert mf.wrote_position == 0
    mf.wrote_position = 1024
    mf2 = q.last_file_for(1024)
    assert mf2.file_from_offset == 1024
    assert sorted(os.listdir(tmp_path)) == [file_name(0), file_name(1024)]
    assert all((tmp_path / n).stat().st_size == 1024 for n in os.listdir(tmp_path))


def test_find_locates_file_by_offset(tmp_path):
    q = MappedFileQueue(tmp_path, 1024, writable=True)
    for off in (0, 1024, 2048):
        q.create_file(off).wrote_position = 1024
    assert q.find(0).file_from_offset == 0
    assert q.find(2047).file_from_offset == 1024
    assert q.find(3072) is None and q.find(-1) is None
    assert q.min_offset() == 0 and q.max_offset() == 3072


def test_file_of_wrong_length_is_rejected_naming_it(tmp_path):
    (tmp_path / file_name(0)).write_bytes(bytes(1024))
    (tmp_path / file_name(1024)).write_bytes(bytes(1000))
    q = MappedFileQueue(tmp_path, 1024, writable=False)
    with pytest.raises(CorruptStoreError) as info:
        q.load()
    assert file_name(1024) in str(info.value)


@pytest.mark.parametrize("name", ["garbage", "0000000000000000001x", "00000000000000000100"])
def test_bad_file_names_are_rejected(tmp_path, name):
    (tmp_path / name).write_bytes(bytes(1024))
    with pytest.raises(CorruptStoreError, match="file"):
        MappedFileQueue(tmp_path, 1024, writable=False).load()


def test_gap_between_files_is_corruption(tmp_path):
    (tmp_path / file_name(0)).write_bytes(bytes(1024))
    (tmp_path / file_name(2048)).write_bytes(bytes(1024))
    with pytest.raises(CorruptStoreError, match="gap"):
        MappedFileQueue(tmp_path, 1024, writable=False).load()


def test_tmp_files_are_invisible_to_readers(tmp_path):
    (tmp_path / file_name(0)).write_bytes(bytes(1024))
    (tmp_path / (file_name(1024) + ".tmp")).write_bytes(bytes(10))
    q = MappedFileQueue(tmp_path, 1024, writable=False)
    q.load()
    assert [m.file_from_offset for m in q.files] == [0]


def test_truncate_dirty_zeroes_tail_and_deletes_later_files(tmp_path):
    q = MappedFileQueue(tmp_path, 1024, writable=True)
    for off in (0, 1024, 2048):
        mf = q.create_file(off)
        mf.mm[:] = b"\x07" * 1024
        mf.wrote_position = 1024
    q.truncate_dirty(1500)
    assert [m.file_from_offset for m in q.files] == [0, 1024]
    assert not (tmp_path / file_name(2048)).exists()
    last = q.files[-1]
    assert last.wrote_position == 476
    assert bytes(last.mm[:476]) == b"\x07" * 476 and bytes(last.mm[476:]) == bytes(548)


def test_reader_refresh_sees_new_and_deleted_files(tmp_path):
    w = MappedFileQueue(tmp_path, 1024, writable=True)
    w.create_file(0).wrote_position = 1024
    r = MappedFileQueue(tmp_path, 1024, writable=False)
    r.load()
    w.create_file(1024)
    assert r.refresh() is True
    assert [m.file_from_offset for m in r.files] == [0, 1024]
    w.delete_first()
    r.refresh()
    assert [m.file_from_offset for m in r.files] == [1024]
