"""Consumer offset files: the broker's ``config/consumerOffset.json`` and the client's ``offsets.json``.

RocketMQ writes both with fastjson 1.x's pretty printer, which is not JSON (spec section 7; the dialect
lives in :mod:`rocketstream.codec.fastjson`). This module maps those documents to offset tables, byte for
byte as RocketMQ 4.9.8 writes them, and keeps the two stores with RocketMQ's file discipline (write
``.tmp``, copy the current file to ``.bak``, rename) plus an fcntl lock so that several processes can
commit without losing each other's updates.

Positions in :class:`OffsetFileError` are 0-based character indexes into the decoded text (byte indexes
when the file is not valid UTF-8).
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from rocketstream.codec.fastjson import FastjsonParser, FrozenObject, dump_fastjson, parse_fastjson
from rocketstream.codec.offset_json import (
    INT32_BOUNDS,
    INT64_BOUNDS,
    MessageQueueKey,
    as_int,
    check_int,
    dump_local_offsets,
    load_local_offsets,
    offset_table_of,
    position_of,
)
from rocketstream.errors import (
    OffsetFileError,
    OptionError,
    ReadOnlyStoreError,
)
from rocketstream.fsutil import fsync_dir, write_atomic, write_synced_tmp
from rocketstream.store.files.durable import os_errors

__all__ = [
    "FrozenObject",
    "MessageQueueKey",
    "ConsumerOffsetDocument",
    "parse_fastjson",
    "dump_fastjson",
    "load_consumer_offsets",
    "load_consumer_offset_document",
    "dump_consumer_offsets",
    "load_local_offsets",
    "dump_local_offsets",
    "ConsumerOffsetManager",
    "FileSignature",
    "OffsetFileRead",
    "load_with_bak",
    "file_signature",
    "read_offset_file",
    "load_consumer_offset_file",
    "exclusive_lock",
    "replace_offset_file",
    "next_data_version",
    "CONSUMER_OFFSET_FILE",
]

CONSUMER_OFFSET_FILE = "consumerOffset.json"  # under <store_root>/config; lock and .bak beside it

T = TypeVar("T")


# ------------------------------------------------------------------------ consumerOffset.json documents


class ConsumerOffsetDocument(NamedTuple):
    table: dict[str, dict[int, int]]  # "topic@group" -> {queueId: next offset}, file order
    data_version: dict[str, object] | None  # 5.x only; None for a 4.x document


def load_consumer_offset_document(text: str | bytes, *, path: object = None) -> ConsumerOffsetDocument:
    """Parse a 4.x or 5.x consumerOffset.json; ``groupTopicMap`` (derived) and unknown fields are ignored."""
    p, doc, raw = offset_table_of(text, path)
    table: dict[str, dict[int, int]] = {}
    for key, queues in raw.items():
        if not isinstance(key, str) or "@" not in key:
            p.fail(f"offset table key {key!r} is not 'topic@group'", position_of(p, raw, key, 0))
        if not isinstance(queues, dict):
            p.fail(f"offsets of {key!r} are not an object", position_of(p, raw, key, 1))
        table[key] = _queue_map(p, key, queues)
    version = doc.get("dataVersion")
    if version is not None and not isinstance(version, dict):
        p.fail("'dataVersion' is not an object", position_of(p, doc, "dataVersion", 1))
    return ConsumerOffsetDocument(table, version)


def _queue_map(p: FastjsonParser, key: str, queues: dict[Any, Any]) -> dict[int, int]:
    result: dict[int, int] = {}
    for qid, offset in queues.items():
        # standard-JSON writers quote the queue ids; fastjson itself converts "3" to 3 on read
        qid_int = int(qid) if isinstance(qid, str) and re.fullmatch(r"-?[0-9]{1,10}", qid) else qid
        if as_int(qid_int, INT32_BOUNDS) is None:
            p.fail(f"queue id {qid!r} of {key!r} is not an int32", position_of(p, queues, qid, 0))
        if as_int(offset, INT64_BOUNDS) is None:
            p.fail(f"offset {offset!r} of {key!r} queue {qid} is not an int64", position_of(p, queues, qid, 1))
        result[qid_int] = offset
    return result


def load_consumer_offsets(text: str | bytes, *, path: object = None) -> dict[str, dict[int, int]]:
    """``"topic@group" -> {queueId: offset}`` from consumerOffset.json text (4.x or 5.x)."""
    return load_consumer_offset_document(text, path=path).table


def dump_consumer_offsets(
    table: Mapping[str, Mapping[int, int]],
    *,
    data_version: Mapping[str, object] | None = None,
    sort_keys: bool = True,
) -> str:
    """RocketMQ 4.9.8's exact consumerOffset.json text (with ``dataVersion`` first when given, as 5.x).

    Queue ids are written ascending; ``topic@group`` keys sorted unless ``sort_keys=False`` (then in the
    mapping's order, which reproduces a file read with :func:`load_consumer_offsets` byte for byte).
    """
    keys = sorted(table) if sort_keys else list(table)
    doc: dict[str, object] = {}
    if data_version is not None:  # bean fields are sorted: dataVersion < offsetTable
        doc["dataVersion"] = {k: data_version[k] for k in sorted(data_version)}
    doc["offsetTable"] = {k: {q: table[k][q] for q in sorted(table[k])} for k in keys}
    return dump_fastjson(doc)


# ------------------------------------------------------------------------------------------ file I/O


def _read_bytes(path: Path) -> bytes | None:
    """File content, or None when the file does not exist."""
    with os_errors("cannot read offset file", path, missing_ok=True):
        return path.read_bytes()
    return None


def load_with_bak(path: Path, parse: Callable[..., T]) -> tuple[T | None, bytes | None]:
    """RocketMQ's load rule: main file; if missing, empty or unparsable, the ``.bak`` next to it.

    Returns (value, main_bytes): value None when neither file exists; main_bytes is the main file's
    content when that is what parsed (it becomes the next ``.bak``), else None.
    """
    raw = _read_bytes(path)
    main_error: OffsetFileError | None = None
    if raw is not None and raw.strip():
        try:
            return parse(raw, path=path), raw
        except OffsetFileError as exc:
            main_error = exc
    bak = path.with_name(path.name + ".bak")
    bak_raw = _read_bytes(bak)
    if bak_raw is not None and bak_raw.strip():
        try:
            return parse(bak_raw, path=bak), None
        except OffsetFileError as exc:
            if main_error is None:
                raise
            raise OffsetFileError(
                f"offset file and its backup are both unusable: {main_error}; backup: {exc}",
                path=path,
                position=main_error.position,
            ) from main_error
    if main_error is not None:  # a corrupt file and no backup: never pretend the table is empty
        raise main_error
    return None, None


@contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    with os_errors("cannot open lock file", lock_path):
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # flock, not lockf: also excludes other handles in this process
        yield
    finally:
        os.close(fd)  # closing releases the lock; the kernel does it too if we are killed


def replace_offset_file(path: Path, text: str, previous: bytes | None) -> None:
    """4.9.8's string2File, made crash safe: .tmp (fsynced), previous content to .bak (via .bak.tmp),
    rename.

    The main file is complete at every instant: the old version until the rename, the new one after;
    so is the backup.
    ``previous`` is the main file's content only when it parsed, so a corrupt file never overwrites a
    good backup.

    The new version's mtime is set to the wall clock in nanoseconds, and past the replaced version's
    mtime when the clock says otherwise: so versions written here have strictly increasing mtimes and
    never share a :class:`FileSignature` even when an inode number is reused (a running broker
    detects other processes' commits by the signature, and orders racing ones by the mtime).
    """
    with os_errors("cannot write offset file", path):
        tmp = write_synced_tmp(path, text.encode("utf-8"))
        stamp = time.time_ns()
        current = file_signature(path)
        if current is not None and stamp <= current.mtime_ns:
            stamp = current.mtime_ns + 1
        os.utime(tmp, ns=(stamp, stamp))
        if previous is not None:
            # the backup too goes through a temporary file: written in place, a kill mid-copy
            # would leave an empty or torn .bak
            write_atomic(path.with_name(path.name + ".bak"), previous)
        os.replace(tmp, path)
        fsync_dir(path.parent)


class FileSignature(NamedTuple):
    """What ``stat`` says about one version of a file. Every writer replaces the offset file by a rename,
    so a new version has a new inode while the old one is still linked: a changed signature means a
    new version, an equal one (on the same path) the version seen before."""

    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int


def _signature(st: os.stat_result) -> FileSignature:
    return FileSignature(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_signature(path: Path) -> FileSignature | None:
    """The file's current :class:`FileSignature`; None when it does not exist (one ``stat`` call)."""
    with os_errors("cannot stat offset file", path, missing_ok=True):
        return _signature(os.stat(path))
    return None


class OffsetFileRead(NamedTuple):
    raw: bytes | None  # None: the file does not exist
    signature: FileSignature | None  # of exactly the version ``raw`` was read from


def read_offset_file(path: Path) -> OffsetFileRead:
    """Read the main file and the signature of the same version (fstat of the open descriptor).

    Readers need no lock: writers replace the file by a rename, so the descriptor sees one whole version.
    """
    with os_errors("cannot read offset file", path, missing_ok=True):
        with open(path, "rb") as f:
            sig = _signature(os.fstat(f.fileno()))
            return OffsetFileRead(f.read(), sig)
    return OffsetFileRead(None, None)


def load_consumer_offset_file(path: Path) -> tuple[ConsumerOffsetDocument | None, bytes | None]:
    """consumerOffset.json with RocketMQ's fallback to ``.bak`` (``ConfigManager.load``/``loadBak``).

    Returns (document, main_bytes) as :func:`load_with_bak`: document None when neither file exists,
    main_bytes None unless the main file is what parsed. Both files unusable: :class:`OffsetFileError`.
    """
    return load_with_bak(path, load_consumer_offset_document)


def next_data_version(version: Mapping[str, object] | None) -> dict[str, object] | None:
    """A 5.x document's ``dataVersion`` advanced as ``DataVersion.nextVersion`` does; None stays None
    (4.x documents have no version)."""
    if version is None:
        return None
    advanced = dict(version)
    counter = as_int(advanced.get("counter"), INT64_BOUNDS)
    advanced["counter"] = counter + 1 if counter is not None else 1
    advanced["timestamp"] = int(time.time() * 1000)
    return advanced


# ----------------------------------------------------------------------------------- broker offsets


class ConsumerOffsetManager:
    """The broker's committed offsets in ``<store_root>/config/consumerOffset.json``.

    Every call reads the file afresh, so several processes (a writer broker, Spark drivers, the CLI)
    can share it; commits are read-modify-write under ``consumerOffset.json.lock``.
    """

    def __init__(self, store_root: str | Path, *, read_only: bool = False) -> None:
        self.config_dir = Path(store_root) / "config"
        self.path = self.config_dir / "consumerOffset.json"
        self.bak_path = self.config_dir / "consumerOffset.json.bak"
        self.lock_path = self.config_dir / "consumerOffset.json.lock"
        self.read_only = read_only

    def _load(self) -> tuple[ConsumerOffsetDocument, bytes | None]:
        doc, raw = load_with_bak(self.path, _parse_remembered)
        return (doc or ConsumerOffsetDocument({}, None)), raw

    def table(self) -> dict[str, dict[int, int]]:
        """``"topic@group" -> {queueId: offset}`` from disk (main file, else .bak); {} when neither exists."""
        return self._load()[0].table

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Committed (next-to-consume) offset, -1 when the group never committed this queue."""
        return self.table().get(f"{topic}@{group}", {}).get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        queues = self.table().get(f"{topic}@{group}", {})
        return {q: queues[q] for q in sorted(queues)}

    def groups(self) -> list[str]:
        """Groups with offsets; a 5.x broadcast key ``topic@g@broadcast`` yields group ``g@broadcast``."""
        return sorted({key.split("@", 1)[1] for key in self.table()})

    def topics_of(self, group: str) -> list[str]:
        return sorted(k.split("@", 1)[0] for k in self.table() if k.split("@", 1)[1] == group)

    def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Set ``offsets`` (queueId -> next offset) of ``group`` on ``topic``; other entries are kept."""
        self.commit_many({(group, topic): offsets})

    def commit_many(self, updates: Mapping[tuple[str, str], Mapping[int, int]]) -> None:
        """Several (group, topic) commits in one atomic rewrite."""
        self._refuse_if_read_only()
        checked: dict[str, dict[int, int]] = {}
        for (group, topic), offsets in updates.items():
            key = _table_key(group, topic)
            queues = {check_int("queue_id", q, INT32_BOUNDS): check_int("offset", o, INT64_BOUNDS)
                      for q, o in offsets.items()}
            if queues:  # an empty commit changes nothing and must not create a "t@g":{} entry
                checked.setdefault(key, {}).update(queues)
        if not checked:
            return

        def apply(table: dict[str, dict[int, int]]) -> None:
            for key, queues in checked.items():
                table.setdefault(key, {}).update(queues)

        self._rewrite(apply)

    def remove_group(self, group: str) -> None:
        """Drop every ``topic@group`` entry of ``group`` (exactly two parts, as RocketMQ's removeOffset)."""
        self._refuse_if_read_only()

        def apply(table: dict[str, dict[int, int]]) -> None:
            for key in [k for k in table if len(k.split("@")) == 2 and k.split("@")[1] == group]:
                del table[key]

        self._rewrite(apply)

    def _refuse_if_read_only(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError("consumer offsets cannot be committed through a read-only store", path=self.path)

    def _rewrite(self, apply: Callable[[dict[str, dict[int, int]]], None]) -> None:
        with os_errors("cannot create config directory", self.config_dir):
            self.config_dir.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(self.lock_path):
            doc, raw = self._load()
            table = {k: dict(v) for k, v in doc.table.items()}
            apply(table)
            if table == doc.table and (raw is not None or not self.path.exists()):
                return  # nothing changed, and the main file is healthy (or there is none to heal)
            version = next_data_version(doc.data_version)  # 5.x: advance it as the broker would
            text = dump_consumer_offsets(table, data_version=version)
            replace_offset_file(self.path, text, raw)
            _remember_parsed(self.path, text.encode("utf-8"), ConsumerOffsetDocument(table, version))


_LAST_PARSED: dict[object, tuple[bytes, ConsumerOffsetDocument]] = {}


def _parse_remembered(text: bytes, *, path: object = None) -> ConsumerOffsetDocument:
    """:func:`load_consumer_offset_document`, but the same bytes of the same file are parsed once (a
    planner commits every trigger, and the file holds what it wrote last time). Callers get their own
    copy of the table."""
    last = _LAST_PARSED.get(path)
    if last is None or last[0] != text:
        last = (bytes(text), load_consumer_offset_document(text, path=path))
        _LAST_PARSED[path] = last
    doc = last[1]
    return ConsumerOffsetDocument({k: dict(v) for k, v in doc.table.items()},
                                  None if doc.data_version is None else dict(doc.data_version))


def _remember_parsed(path: object, text: bytes, doc: ConsumerOffsetDocument) -> None:
    """What a rewrite just wrote is what the next load parses: the document it was dumped from, in the
    file's order (:func:`dump_consumer_offsets` sorts keys and queue ids)."""
    table = {k: {q: doc.table[k][q] for q in sorted(doc.table[k])} for k in sorted(doc.table)}
    _LAST_PARSED[path] = (text, ConsumerOffsetDocument(table,
                                                       None if doc.data_version is None else dict(doc.data_version)))


def _table_key(group: str, topic: str) -> str:
    if not isinstance(topic, str) or not topic or "@" in topic:
        raise OptionError("topic", "must be a non-empty string without '@'", topic)
    if not isinstance(group, str) or not group:  # '@' allowed: 5.x commits "<group>@broadcast"
        raise OptionError("group", "must be a non-empty string", group)
    return f"{topic}@{group}"
