"""Fixed-size memory-mapped files named by their 20-digit start offset, and the queue of them.

A ``MappedFileQueue`` is one directory (``commitlog/`` or ``consumequeue/<topic>/<queueId>/``) of
equally sized files ``00000000000000000000``, ``<fileSize>``, ... (``UtilAll.offset2FileName``). Writers append at
``wrote_position`` of the last file; readers only ever see whole files because a new file is created
as ``<name>.tmp``, sized with ftruncate, and renamed into place.

Mappings are never closed explicitly while the store is open: numpy views handed to readers keep
the mmap exported, and an unlinked file stays readable through its mapping until the last view
goes away (Linux semantics). Dropping the ``MappedFile`` is enough to release it.

A zero-length *last* file is what a crash between creating and sizing a file leaves (and what a live
Java broker shows for an instant while it maps a new file). RocketMQ 5.x's ``MappedFileQueue.doLoad``
deletes it; 4.9.8 refuses to start. It holds nothing: a reader skips it, a writer removes it.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import time
from pathlib import Path

import numpy as np

from rocketstream.errors import CorruptStoreError, StoreError
from rocketstream.store.files.durable import os_errors

NAME_LENGTH = 20
_ZERO_CHUNK = 4 << 20
_TRUSTED_AGE_NS = 2_000_000_000   # MappedFileQueue.refresh: a listing reused while the directory is unchanged
log = logging.getLogger(__name__)


def file_name(offset: int) -> str:
    """20-digit zero-padded decimal name of the file starting at ``offset``."""
    return f"{offset:020d}"


def data_regions(path: Path, position: int, size: int) -> list[tuple[int, int]]:
    """[start, end) ranges of ``path`` at or after ``position`` (and before ``size``) that may hold non-zero
    bytes, by SEEK_DATA / SEEK_HOLE: a pre-allocated mapped file, and a real broker's index file, are
    sparse beyond their data. The whole range where the file system cannot tell."""
    with os_errors("cannot open", path):
        fd = os.open(path, os.O_RDONLY)
    regions = []
    try:
        pos = position
        while pos < size:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:        # nothing but a hole up to the end
                    break
                return [(position, size)]   # no SEEK_DATA here: look at everything
            if data >= size:
                break
            hole = min(os.lseek(fd, data, os.SEEK_HOLE), size)
            regions.append((max(data, position), hole))
            pos = hole
    finally:
        os.close(fd)
    return regions


def datasync_path(path: Path) -> None:
    """fdatasync ``path`` (see ``MappedFile.datasync``); nothing when it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        with os_errors("cannot sync file", path):
            os.fdatasync(fd)
    finally:
        os.close(fd)


class EmptyFileError(CorruptStoreError):
    """A zero-length file where a mapped file should be: damage, except as the last file (module docstring)."""


class MappedFile:
    """One mapped file. ``wrote_position`` is the end of data (a reader's view of it may lag)."""

    def __init__(self, path: Path, file_size: int, *, writable: bool) -> None:
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(path.name)
        self.writable = writable
        with os_errors("cannot map file", path):
            fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
            try:
                actual = os.fstat(fd).st_size
                if actual != file_size:
                    raise (EmptyFileError if actual == 0 else CorruptStoreError)(
                        f"file has length {actual}, expected {file_size}", path=path)
                self.mm = mmap.mmap(fd, file_size, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
            finally:
                os.close(fd)
        self.array: np.ndarray = np.frombuffer(self.mm, dtype=np.uint8)
        self.wrote_position = file_size  # "as if full" until recovery says otherwise (MappedFileQueue.load)
        self.flushed_position = file_size

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def flush(self) -> None:
        """msync the dirty range [flushed_position, wrote_position) (page-aligned start)."""
        if not self.writable or self.wrote_position <= self.flushed_position:
            return
        start = self.flushed_position - self.flushed_position % mmap.PAGESIZE
        self.mm.flush(start, self.wrote_position - start)
        self.flushed_position = self.wrote_position

    def datasync(self) -> None:
        """fdatasync the file through a descriptor of its own: msync's durability for the whole file (only
        dirty pages are written, those of the mapping included), but with the GIL released, so another
        thread keeps running meanwhile (``mmap.flush`` holds the GIL through its msync). Callable from any
        thread; a file retention deleted meanwhile holds nothing to keep."""
        datasync_path(self.path)

    def zero_tail(self, position: int) -> None:
        """Zero every non-zero byte in [position, file_size): removes a torn write for good.

        Only the file's data regions are looked at (SEEK_DATA / SEEK_HOLE): a pre-allocated file is
        sparse beyond its end, and reading its holes (zeros by definition) cost ~6 MB of page
        faults per consume queue on every writer open."""
        for start, end in data_regions(self.path, position, self.file_size):
            pos = start
            while pos < end:
                stop = min(pos + _ZERO_CHUNK, end)
                if self.array[pos:stop].any():
                    self.mm[pos:stop] = bytes(stop - pos)
                pos = stop

    def set_positions(self, position: int) -> None:
        self.wrote_position = self.flushed_position = position

    def release(self) -> None:
        """Close the mapping if nobody holds a view into it; otherwise leave it to the GC."""
        try:
            del self.array
            self.mm.close()
        except (BufferError, AttributeError):
            pass


class FileWriter:
    """The write descriptor the commit log and each consume queue keep: one ``O_WRONLY`` descriptor on the
    mapped file being appended to, reopened when the append moves to the next file. ``what`` names the
    file kind in errors (``"commit log"``, ``"consume queue"``)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._file: MappedFile | None = None
        self._fd = -1

    def pwrite(self, mf: MappedFile, data: memoryview, pos: int) -> None:
        """Write all of ``data`` at file position ``pos`` of ``mf`` (a regular file may still return short)."""
        if self._file is not mf:
            self.close()
            with os_errors("cannot open for writing", mf.path):
                self._fd = os.open(mf.path, os.O_WRONLY)
            self._file = mf
        while data:
            with os_errors(f"cannot write the {self.what}", mf.path, mf.file_from_offset + pos):
                n = os.pwrite(self._fd, data, pos)
            data, pos = data[n:], pos + n

    def close(self) -> None:
        if self._file is not None:
            self._file = None
            os.close(self._fd)


class MappedFileQueue:
    """The ordered files of one directory; offsets are virtual (fileFromOffset + position)."""

    def __init__(self, directory: Path, file_size: int, *, writable: bool) -> None:
        self.directory = directory
        self.file_size = file_size
        self.writable = writable
        self.files: list[MappedFile] = []
        self._listed_mtime: int | None = None   # reader: directory mtime of a listing still valid (refresh)
        self._dropped_empty = False

    # --- loading ------------------------------------------------------------------------------
    def _list_names(self, *, check_last: bool = True) -> list[str]:
        """The data files' names, sorted. ``check_last=False``: a zero-length last file is left to the caller
        (a reader's ``load`` sees it when it maps the file)."""
        try:
            names = os.listdir(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for name in names:
            if name.startswith(".") or name.endswith(".tmp"):
                continue  # hidden files and a writer's half-created next file
            if len(name) != NAME_LENGTH or not name.isdigit():
                raise CorruptStoreError(f"unexpected file name {name!r} (expected a 20-digit offset)",
                                        path=self.directory / name)
            if int(name) % self.file_size:
                raise CorruptStoreError(f"file offset {int(name)} is not a multiple of the file size "
                                        f"{self.file_size}", path=self.directory / name)
            out.append(name)
        out.sort()
        self._dropped_empty = False
        if check_last and out and self._is_empty(out[-1]):
            self._dropped_empty = True
            if self.writable:
                log.warning("removing the zero-length last file %s (a crash while creating it; it holds nothing)",
                            self.directory / out[-1])
                self._unlink(self.directory / out[-1])
            out.pop()
        return out

    def _is_empty(self, name: str) -> bool:
        try:
            return os.stat(self.directory / name).st_size == 0
        except FileNotFoundError:
            return False   # gone meanwhile: the caller's open reports or skips it

    def _unlink(self, path: Path) -> None:
        with os_errors("cannot delete file", path, missing_ok=True):
            os.unlink(path)

    def load(self) -> None:
        """Map every file (``MappedFileQueue.load``); a gap between files is corruption.

        A reader racing retention can see a listed file vanish before it is mapped. Retention deletes
        oldest first, so every file mapped before that one is gone as well: start over after it.
        """
        for mf in self.files:
            mf.release()
        self.files = []
        mtime = None if self.writable else self._mtime()   # before listing: a change after it is seen
        names = self._list_names(check_last=self.writable)
        for name in names:
            try:
                self._append_mapped(self.directory / name)
            except EmptyFileError:
                if self.writable or name != names[-1]:
                    raise
                self._dropped_empty = True   # a reader skips an empty last file (module docstring)
            except StoreError:
                if self.writable or (self.directory / name).exists():
                    raise
                for mf in self.files:
                    mf.release()
                self.files = []
        self._listed_mtime = mtime if self._trusted(mtime) and len(self.files) == len(names) else None

    def _append_mapped(self, path: Path) -> MappedFile:
        mf = MappedFile(path, self.file_size, writable=self.writable)
        if self.files and mf.file_from_offset != self.files[-1].end_offset:
            raise CorruptStoreError(f"gap in the file sequence: expected a file at offset "
                                    f"{self.files[-1].end_offset}", path=path)
        self.files.append(mf)
        return mf

    def refresh(self) -> bool:
        """Reader side: drop files a writer deleted at the front, map new files at the end.

        Returns True when new files were mapped.

        The directory is listed again only when its mtime changed since a listing taken when that mtime
        was already ``_TRUSTED_AGE_NS`` old (creating, renaming or deleting a file sets the mtime to the
        kernel's clock, so a later change cannot carry the old value); a planner refreshing a thousand
        queues per trigger then pays a stat per queue instead of a listdir.
        """
        mtime = self._mtime()
        if mtime is not None and mtime == self._listed_mtime:
            return False
        names = self._list_names()
        self._listed_mtime = mtime if self._trusted(mtime) else None
        present = set(names)
        while self.files and self.files[0].path.name not in present:
            self.files.pop(0)
        last = self.files[-1].file_from_offset if self.files else -1
        grew = False
        for name in names:
            if int(name) > last:
                try:
                    mf = self._append_mapped(self.directory / name)
                except StoreError:
                    if not (self.directory / name).exists():
                        self._listed_mtime = None
                        break  # deleted between listdir and open
                    raise
                mf.wrote_position = 0  # unknown yet: the owner scans for the end
                grew = True
        return grew

    def _mtime(self) -> int | None:
        try:
            return os.stat(self.directory).st_mtime_ns
        except OSError:
            return None

    def _trusted(self, mtime: int | None) -> bool:
        """A reader's listing taken at directory mtime ``mtime`` stays valid while the mtime is unchanged
        (``refresh``)."""
        return (mtime is not None and not self.writable and not self._dropped_empty
                and time.time_ns() - mtime > _TRUSTED_AGE_NS)

    # --- geometry -----------------------------------------------------------------------------
    @property
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    def max_offset(self) -> int:
        last = self.last
        return last.file_from_offset + last.wrote_position if last else 0

    def find(self, offset: int) -> MappedFile | None:
        """The file covering ``offset`` (``MappedFileQueue.findMappedFileByOffset``), or None."""
        files = self.files
        if not files or offset < files[0].file_from_offset or offset >= files[-1].end_offset:
            return None
        idx = (offset - files[0].file_from_offset) // self.file_size
        mf = files[idx]
        if mf.file_from_offset <= offset < mf.end_offset:
            return mf
        for mf in files:  # a gap would make the index arithmetic wrong; fall back to a scan
            if mf.file_from_offset <= offset < mf.end_offset:
                return mf
        return None

    # --- writing ------------------------------------------------------------------------------
    def create_file(self, from_offset: int) -> MappedFile:
        """Create ``<name>.tmp`` at full size, rename it into place, and map it."""
        if not self.writable:
            raise StoreError("cannot create files in a read-only store", path=self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / file_name(from_offset)
        tmp = final.with_name(final.name + ".tmp")
        with os_errors("cannot create mapped file", final):
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, self.file_size)
            finally:
                os.close(fd)
            os.rename(tmp, final)
        mf = self._append_mapped(final)
        mf.set_positions(0)
        return mf

    def last_file_for(self, offset: int) -> MappedFile:
        """The file to append at virtual ``offset``: the last file, or a new one (``getLastMappedFile``)."""
        last = self.last
        if last is None:
            return self.create_file(offset - offset % self.file_size)
        if last.is_full:
            return self.create_file(last.end_offset)
        return last

    def truncate_dirty(self, offset: int) -> None:
        """Files beyond ``offset`` are deleted; the one containing it ends there (zeroed after)."""
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.end_offset <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                mf.set_positions(offset - mf.file_from_offset)
                if self.writable:
                    mf.zero_tail(mf.wrote_position)
                keep.append(mf)
            else:
                self._delete(mf)
        self.files = keep

    def delete_first(self, count: int = 1) -> list[Path]:
        gone = []
        for _ in range(count):
            mf = self.files.pop(0)
            self._delete(mf)
            gone.append(mf.path)
        return gone

    def delete_last(self) -> Path:
        mf = self.files.pop()
        self._delete(mf)
        return mf.path

    def _delete(self, mf: MappedFile) -> None:
        if not self.writable:
            raise StoreError("cannot delete files in a read-only store", path=mf.path)
        # No explicit unmap: a reader thread may still hold a view; the mapping dies with its last user.
        self._unlink(mf.path)

    def remove_stale_tmp(self) -> None:
        """A writer crash can leave a half-created ``.tmp`` next file; it never held data."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        for name in names:
            if name.endswith(".tmp") and name[:-4].isdigit():
                self._unlink(self.directory / name)

    def flush(self) -> None:
        for mf in self.files:
            mf.flush()

    def release(self) -> None:
        for mf in self.files:
            mf.release()
        self.files = []
