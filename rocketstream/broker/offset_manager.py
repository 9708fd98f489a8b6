"""The broker's consumer offsets: RocketMQ 4.9.8's ``ConsumerOffsetManager``, shared with other processes.

In memory, as the Java broker keeps it: ``"topic@group" -> {queueId: next offset}``; persisted to
``<store_root>/config/consumerOffset.json`` in RocketMQ's layout (fastjson's pretty print, ``.bak`` kept
as ``MixAll.string2File`` does, read back with ``ConfigManager.load``'s fallback to the ``.bak``). The
file format and the file discipline are :mod:`rocketstream.store.meta.offsets`, which other processes
use to commit to the same file: a Spark query in local mode (``rocketstream.spark.offset_store``) and
the CLI, each a read-modify-write under the exclusive lock file ``consumerOffset.json.lock``.

Offsets committed by other processes
------------------------------------
A Java broker rewrites the file from memory every 5 s and so silently drops what other processes
committed meanwhile. We chose the **merge** (not routing local-mode commits through the broker: the
local-mode writers keep working with or without a broker running). Per ``(topic@group, queueId)``
entry, newest wins, with "newest" decided by the order of observations, never by comparing clocks:

* *Base.* We keep the file's content as we last saw it (at ``load``, at each check, after our own
  ``persist``) and the :class:`FileSignature` (inode, size, mtime, ctime) of that version.
* *Checks.* Every call (``commit_offset``, ``query_offset``, ``table``, ``clone_offset``, ``remove_offset``
  ...) first ``stat``-s the file: one syscall, about 3 microseconds. When the signature changed, the
  new version is read and every entry whose value differs from the base (changed, appeared, removed)
  is an *external change*. ``persist`` makes the same check, re-reading the file under the exclusive
  lock file the other writers hold while they write.
* *Order.* A broker update counts as made at the check that opens its call. An external change found
  by a check was written after the previous check, so after every broker update made so far: it
  replaces the in-memory value. A broker update made after that check replaces it in turn. So each
  entry ends up with the value of its latest commit, whichever process made it. (An external write
  landing in the microseconds between a call's check and its update counts as the later one.)
* *Persist* then writes the in-memory table (unless the file already says exactly that) and makes the
  written version the new base. Groups, topics and queues that appeared on disk are in memory by then:
  nothing another process committed is dropped, and nothing the broker committed is either.

We considered stamping broker updates with their wall-clock time, checking the file only on the 5 s
tick and comparing the stamps with the file's mtime. That is strictly less precise (the mtime is the
newest of possibly several external versions, so an older external commit carried along by a newer
file would beat a broker commit made in between) and saves only the ``stat`` per call.

Limits, by construction: a change is a *difference* from the base, so an external commit that
rewrites the value the file already held is invisible and does not override a newer in-memory value
of that entry; a file that vanishes is no change (``persist`` writes it again). Two versions could
share a signature only if an inode number were reused with the same size and times; our writers
(:func:`~rocketstream.store.meta.offsets.replace_offset_file`) give every version a strictly later
nanosecond mtime, which rules that out.

Bad files: ``load`` follows ``ConfigManager.load`` (main file, else ``.bak``); when both are unusable it
raises :class:`OffsetFileError` naming the file and nothing is written. A main file that changes into
something unparsable later is not merged; commits and queries go on from memory, and ``persist`` raises
the :class:`OffsetFileError` (naming the file) without writing, until the file parses again or is gone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from rocketstream.errors import OffsetFileError, OptionError
from rocketstream.store.files.durable import os_errors
from rocketstream.store.meta.offsets import (
    CONSUMER_OFFSET_FILE,
    FileSignature,
    OffsetFileRead,
    dump_consumer_offsets,
    exclusive_lock,
    file_signature,
    load_consumer_offset_document,
    load_consumer_offset_file,
    next_data_version,
    read_offset_file,
    replace_offset_file,
)

__all__ = ["BrokerOffsetManager", "TOPIC_GROUP_SEPARATOR"]

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"  # ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def _split(key: str) -> list[str]:
    return key.split(TOPIC_GROUP_SEPARATOR)


class BrokerOffsetManager:
    """``ConsumerOffsetManager`` over ``<store_root>/config/consumerOffset.json``; see the module docstring.

    Thread safe (one re-entrant lock), though the broker calls it from its event loop only;
    ``persist`` may run in an executor. ``min_offset_in_queue(topic, queue_id)`` (the store's
    ``getMinOffsetInQueue``) is what ``query_min_offset_in_all_group`` compares offsets with.
    """

    def __init__(
        self,
        store_root: str | Path,
        *,
        min_offset_in_queue: Callable[[str, int], int] | None = None,
    ) -> None:
        self.config_dir = Path(store_root) / "config"
        self.path = self.config_dir / CONSUMER_OFFSET_FILE
        self.bak_path = self.config_dir / (CONSUMER_OFFSET_FILE + ".bak")
        self.lock_path = self.config_dir / (CONSUMER_OFFSET_FILE + ".lock")
        self.min_offset_in_queue = min_offset_in_queue
        self._lock = threading.RLock()
        self._table: dict[str, dict[int, int]] = {}
        self._base: dict[str, dict[int, int]] = {}  # the file's content as last seen
        self._sig: FileSignature | None = None  # the version _base came from (None: no main file)
        self._main_ok = False  # that version parsed (it may become the next .bak)
        self._disk_error: OffsetFileError | None = None  # a changed main file that did not parse
        self._data_version: dict[str, object] | None = None  # 5.x documents only

    # ---------------------------------------------------------------------------------------- loading

    def load(self) -> None:
        """Read the file (else its ``.bak``); a missing file is an empty table. Replaces memory."""
        with self._lock:
            self._mkdir()
            with exclusive_lock(self.lock_path):  # no writer replaces the file between read and stat
                doc, main_raw = load_consumer_offset_file(self.path)
                sig = file_signature(self.path)
            if doc is not None and main_raw is None:
                log.warning("%s is missing or unusable; loaded %s", self.path, self.bak_path)
            table = doc.table if doc is not None else {}
            self._table = _copy(table)
            self._base = _copy(table)
            self._sig = sig
            self._main_ok = main_raw is not None
            self._disk_error = None
            self._data_version = doc.data_version if doc is not None else None

    # -------------------------------------------------------------------------------------- broker API

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set the group's next offset of one queue (``commitOffset``); a decrease is logged, as in Java.

        A queue id outside int32 or an offset outside int64 raises :class:`OptionError` naming the
        header field: written, it would make the file unreadable (Java's header parsing refuses them).
        """
        if isinstance(queue_id, bool) or not isinstance(queue_id, int) or not _INT32[0] <= queue_id <= _INT32[1]:
            raise OptionError("queueId", "must be an int32", queue_id)
        if isinstance(offset, bool) or not isinstance(offset, int) or not _INT64[0] <= offset <= _INT64[1]:
            raise OptionError("commitOffset", "must be an int64", offset)
        key = topic + TOPIC_GROUP_SEPARATOR + group
        with self._lock:
            self._check()
            queues = self._table.setdefault(key, {})
            old = queues.get(queue_id)
            queues[queue_id] = offset
        if old is not None and offset < old:
            log.warning("[NOTIFYME]update consumer offset less than store. clientHost=%s, key=%s, queueId=%d, "
                        "requestOffset=%d, storeOffset=%d", client_host, key, queue_id, offset, old)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset, -1 when the group has none for this queue (``queryOffset``)."""
        with self._lock:
            self._check()
            return self._table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}).get(queue_id, -1)

    def table(self) -> dict[str, dict[int, int]]:
        """A copy of ``"topic@group" -> {queueId: offset}``."""
        with self._lock:
            self._check()
            return _copy(self._table)

    def topics_of_group(self, group: str) -> set[str]:
        """``whichTopicByConsumer``: topics of two-part keys ``topic@group``."""
        with self._lock:
            self._check()
            return {parts[0] for parts in map(_split, self._table) if len(parts) == 2 and parts[1] == group}

    def groups_of_topic(self, topic: str) -> set[str]:
        """``whichGroupByTopic``: groups of two-part keys ``topic@group``."""
        with self._lock:
            self._check()
            return {parts[1] for parts in map(_split, self._table) if len(parts) == 2 and parts[0] == topic}

    def remove_offset(self, group: str) -> None:
        """Drop every two-part ``topic@group`` entry of ``group`` (``removeOffset``)."""
        with self._lock:
            self._check()
            for key in [k for k in self._table if len(_split(k)) == 2 and _split(k)[1] == group]:
                del self._table[key]
                log.warning("clean group offset %s", key)

    def clone_offset(self, src_group: str, dst_group: str, topic: str) -> None:
        """Replace ``dst_group``'s offsets on ``topic`` by a copy of ``src_group``'s (``cloneOffset``);
        nothing happens when the source has none."""
        with self._lock:
            self._check()
            src = self._table.get(topic + TOPIC_GROUP_SEPARATOR + src_group)
            if src is not None:
                self._table[topic + TOPIC_GROUP_SEPARATOR + dst_group] = dict(src)

    def query_min_offset_in_all_group(
        self,
        topic: str,
        filter_groups: str | Iterable[str] | None,
        *,
        min_offset_in_queue: Callable[[str, int], int] | None = None,
    ) -> dict[int, int]:
        """``queryMinOffsetInAllGroup``: per queue of ``topic``, the smallest offset any group committed,
        leaving out the groups in ``filter_groups`` (comma-separated, as on the wire, or an iterable) and
        offsets below the queue's minimum offset in the store (when ``min_offset_in_queue`` is known).

        Java's version removes the filtered groups' entries from the live table as a side effect (it
        iterates ``keySet()`` with ``remove``); we only leave them out of the answer.
        """
        if isinstance(filter_groups, str):
            excluded = {g for g in filter_groups.split(",") if g.strip()}
        else:
            excluded = set(filter_groups or ())
        min_of = min_offset_in_queue or self.min_offset_in_queue
        result: dict[int, int] = {}
        for key, queues in self.table().items():
            parts = _split(key)
            if parts[0] != topic or (len(parts) > 1 and parts[1] in excluded):
                continue
            for queue_id, offset in queues.items():
                if min_of is not None and offset < min_of(topic, queue_id):
                    continue
                result[queue_id] = min(offset, result.get(queue_id, offset))
        return result

    # ----------------------------------------------------------------------------------------- persist

    def persist(self) -> None:
        """Merge what other processes committed (module docstring) and write the table atomically.

        Raises :class:`OffsetFileError` (naming the file) and writes nothing when the file changed into
        something that does not parse.
        """
        with self._lock:
            self._mkdir()
            with exclusive_lock(self.lock_path):
                read = read_offset_file(self.path)
                if read.signature != self._sig:
                    self._observe(read)
                if self._disk_error is not None:
                    raise OffsetFileError(f"not persisting the broker's offsets over a file that does not "
                                          f"parse: {self._disk_error}", path=self.path,
                                          position=self._disk_error.position) from self._disk_error
                if read.signature is not None and self._main_ok and self._table == self._base:
                    return  # the file already says exactly this
                version = next_data_version(self._data_version)
                snapshot = _copy(self._table)
                replace_offset_file(self.path, dump_consumer_offsets(snapshot, data_version=version),
                                    read.raw if self._main_ok else None)
                self._sig = file_signature(self.path)  # our own version: under the lock nobody else wrote
            self._base = snapshot
            self._main_ok = True
            self._data_version = version

    # --------------------------------------------------------------------------------- disk changes

    def _check(self) -> None:
        """Take in the file's new version, if there is one (the update that follows counts as later)."""
        sig = file_signature(self.path)
        if sig != self._sig and sig is not None:
            self._observe(read_offset_file(self.path))

    def _observe(self, read: OffsetFileRead) -> None:
        """Take in a new version of the file: its changes against the base are newer than memory."""
        if read.raw is None or read.signature is None:
            return  # the file is gone: no change to take in (persist writes it again); keep the base
        try:
            doc = load_consumer_offset_document(read.raw, path=self.path)
        except OffsetFileError as exc:
            if self._disk_error is None or self._sig != read.signature:
                log.warning("offsets of other processes not merged: %s", exc)
            self._disk_error = exc
            self._sig = read.signature
            self._main_ok = False
            return
        disk = doc.table
        for key in self._base.keys() | disk.keys():
            base_q, disk_q = self._base.get(key, {}), disk.get(key, {})
            if base_q == disk_q:
                continue
            for queue_id in base_q.keys() | disk_q.keys():
                value = disk_q.get(queue_id)
                if base_q.get(queue_id) == value:
                    continue
                if value is None:
                    queues = self._table.get(key)
                    if queues is not None:
                        queues.pop(queue_id, None)
                        if not queues:
                            del self._table[key]
                else:
                    self._table.setdefault(key, {})[queue_id] = value
        self._base = _copy(disk)
        self._sig = read.signature
        self._main_ok = True
        self._disk_error = None
        self._data_version = doc.data_version

    def _mkdir(self) -> None:
        with os_errors("cannot create config directory", self.config_dir):
            self.config_dir.mkdir(parents=True, exist_ok=True)


def _copy(table: Mapping[str, Mapping[int, int]]) -> dict[str, dict[int, int]]:
    return {k: dict(v) for k, v in table.items()}
