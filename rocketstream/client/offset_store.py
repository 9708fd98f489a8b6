"""Consumer offset stores (seed 000 section 4; ``org.apache.rocketmq.client.consumer.store`` 4.9.8).

* :class:`RemoteBrokerOffsetStore` (CLUSTERING): offsets live on the broker. ``update_offset`` only changes
  the in-memory ``offset_table``; ``persist_all`` (every 5 s from the client instance) sends each queue's offset
  with a oneway UPDATE_CONSUMER_OFFSET to the master of its broker (:class:`BrokerOffsetClient` sends the
  requests); ``read_offset(..., READ_FROM_STORE)`` asks the broker (QUERY_CONSUMER_OFFSET): the committed offset,
  -1 when the broker has none (QUERY_NOT_FOUND or any other broker error code), -2 on a connection problem
  (RocketMQ skips the queue for this rebalance).
* :class:`LocalFileOffsetStore` (BROADCASTING): offsets in ``<dir>/<clientId>/<group>/offsets.json`` in
  RocketMQ's own format (``OffsetSerializeWrapper`` written by fastjson), ``~/.rocketmq_offsets`` by default
  (Java's system property ``rocketmq.client.localOffsetStoreDir``).
* :class:`LocalOffsetStore`: the file itself (read with the ``.bak`` fallback; write ``.tmp`` -> ``.bak`` ->
  rename under an flock so that several processes, e.g. Spark drivers, can share it); the text format is
  :mod:`rocketstream.codec.offset_json`.
"""

from __future__ import annotations

import asyncio
import enum
import fcntl
import logging
import os
import threading
from collections.abc import Awaitable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from rocketstream.client.allocate import MessageQueue
from rocketstream.codec.offset_json import (
    INT64_BOUNDS,
    MessageQueueKey,
    check_int,
    dump_local_offsets,
    load_local_offsets,
    mq_key,
)
from rocketstream.errors import BrokerResponseError, OffsetFileError, RemotingError
from rocketstream.fsutil import fsync_dir, write_atomic, write_synced_tmp

__all__ = [
    "ReadOffsetType",
    "OffsetStore",
    "RemoteBrokerOffsetStore",
    "BrokerOffsetAPI",
    "BrokerOffsetClient",
    "LocalFileOffsetStore",
    "LocalOffsetStore",
    "default_local_offset_dir",
    "LOCAL_OFFSET_STORE_DIR_ENV",
]

log = logging.getLogger("rocketstream.client")

# Java: System.getProperty("rocketmq.client.localOffsetStoreDir", ~/.rocketmq_offsets)
LOCAL_OFFSET_STORE_DIR_ENV = "ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR"


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"


class OffsetStore(Protocol):
    """``OffsetStore``: what the consumers call."""

    offset_table: dict[MessageQueue, int]

    def load(self) -> None: ...
    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...
    def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> Awaitable[int]: ...
    def persist_all(self, mqs: Iterable[MessageQueue]) -> Awaitable[None]: ...
    def persist(self, mq: MessageQueue) -> Awaitable[None]: ...
    def remove_offset(self, mq: MessageQueue) -> None: ...
    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]: ...


class _MemoryTable:
    """The in-memory ``offsetTable`` both stores share (``ConcurrentMap<MessageQueue, AtomicLong>``)."""

    def __init__(self) -> None:
        self.offset_table: dict[MessageQueue, int] = {}
        self._mutex = threading.Lock()

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        """``updateOffset``: set the queue's next offset; ``increase_only`` never moves it back."""
        with self._mutex:
            old = self.offset_table.get(mq)
            if old is None or not increase_only or offset > old:
                self.offset_table[mq] = offset

    def memory_offset(self, mq: MessageQueue) -> int:
        with self._mutex:
            return self.offset_table.get(mq, -1)

    def remove_offset(self, mq: MessageQueue) -> None:
        with self._mutex:
            self.offset_table.pop(mq, None)

    def clone_offset_table(self, topic: str) -> dict[MessageQueue, int]:
        with self._mutex:
            return {mq: off for mq, off in self.offset_table.items() if not topic or mq.topic == topic}

    def snapshot(self, mqs: Iterable[MessageQueue] | None = None) -> dict[MessageQueue, int]:
        with self._mutex:
            if mqs is None:
                return dict(self.offset_table)
            wanted = set(mqs)
            return {mq: off for mq, off in self.offset_table.items() if mq in wanted}


class BrokerOffsetAPI(Protocol):
    """The two requests RemoteBrokerOffsetStore sends, each to the master of the queue's broker."""

    async def query_offset(self, mq: MessageQueue) -> int | None: ...
    async def update_offset(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None: ...


class _OffsetRequests(Protocol):
    """What :class:`BrokerOffsetClient` uses of ``MQClientAPI``."""

    async def query_offset(self, addr: str, group: str, topic: str, queue_id: int) -> int | None: ...
    async def update_offset(self, addr: str, group: str, topic: str, queue_id: int, offset: int, *,
                            oneway: bool = True) -> None: ...


class ClientInstanceLike(Protocol):
    """What :class:`BrokerOffsetClient` uses of ``MQClientInstance``."""

    @property
    def api(self) -> _OffsetRequests: ...
    async def find_master_addr(self, broker_name: str, topic: str) -> str: ...


class BrokerOffsetClient:
    """:class:`BrokerOffsetAPI` over a client instance, for consumer group ``group``: QUERY_CONSUMER_OFFSET and
    UPDATE_CONSUMER_OFFSET to the master of the queue's broker (``RemoteBrokerOffsetStore.fetchConsumeOffsetFromBroker``
    and ``updateConsumeOffsetToBroker``: ``findBrokerAddressInSubscribe``, the route fetched once when the broker is
    unknown)."""

    def __init__(self, instance: ClientInstanceLike, group: str) -> None:
        self.instance = instance
        self.group = group

    async def query_offset(self, mq: MessageQueue) -> int | None:
        addr = await self.instance.find_master_addr(mq.broker_name, mq.topic)
        return await self.instance.api.query_offset(addr, self.group, mq.topic, mq.queue_id)

    async def update_offset(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        addr = await self.instance.find_master_addr(mq.broker_name, mq.topic)
        await self.instance.api.update_offset(addr, self.group, mq.topic, mq.queue_id, offset, oneway=oneway)


class RemoteBrokerOffsetStore(_MemoryTable):
    """CLUSTERING offsets, kept by the broker (``RemoteBrokerOffsetStore``); ``broker`` sends its requests
    (:class:`BrokerOffsetClient` in the consumers)."""

    def __init__(self, group: str, broker: BrokerOffsetAPI) -> None:
        super().__init__()
        self.group = group
        self.broker = broker

    async def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        """``updateConsumeOffsetToBroker``: UPDATE_CONSUMER_OFFSET of ``offset`` for ``mq``; with ``oneway=False``
        the broker's answer is awaited and a failure raised (BrokerResponseError, RemotingError, MQClientError)."""
        await self.broker.update_offset(mq, offset, oneway=oneway)

    def load(self) -> None:
        """Nothing to load: the broker has the offsets."""

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int:
        if type_ in (ReadOffsetType.READ_FROM_MEMORY, ReadOffsetType.MEMORY_FIRST_THEN_STORE):
            off = self.memory_offset(mq)
            if off >= 0 or type_ is ReadOffsetType.READ_FROM_MEMORY:
                return off
        try:
            found = await self.broker.query_offset(mq)
        except BrokerResponseError as exc:   # RocketMQ: any broker error code means "no offset"
            log.info("offset of %s for %s: broker answered %s; treated as none", mq, self.group, exc)
            return -1
        except (RemotingError, asyncio.TimeoutError) as exc:
            log.warning("offset of %s for %s not readable: %s", mq, self.group, exc)
            return -2
        if found is None:
            return -1
        self.update_offset(mq, found, False)
        return found

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """``persistAll``: oneway UPDATE_CONSUMER_OFFSET for every given queue with a known offset; offsets
        of queues no longer given are forgotten."""
        wanted = set(mqs)
        if not wanted:
            return
        for mq, off in self.snapshot().items():
            if mq in wanted:
                try:
                    await self.broker.update_offset(mq, off)
                except (RemotingError, asyncio.TimeoutError) as exc:
                    log.warning("persist offset %d of %s for %s failed: %s", off, mq, self.group, exc)
            else:
                self.remove_offset(mq)

    async def persist(self, mq: MessageQueue) -> None:
        off = self.memory_offset(mq)
        if off >= 0:
            try:
                await self.broker.update_offset(mq, off)
            except (RemotingError, asyncio.TimeoutError) as exc:
                log.warning("persist offset %d of %s for %s failed: %s", off, mq, self.group, exc)


def default_local_offset_dir() -> Path:
    """The Java client's default when ``rocketmq.client.localOffsetStoreDir`` is unset (here the
    ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR environment variable overrides it)."""
    env = os.environ.get(LOCAL_OFFSET_STORE_DIR_ENV)
    return Path(env) if env else Path.home() / ".rocketmq_offsets"


def _os_error(what: str, path: Path, exc: OSError) -> OffsetFileError:
    return OffsetFileError(f"{what}: [Errno {exc.errno}] {exc.strerror}", path=path)


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _os_error("cannot read offset file", path, exc) from exc


def _load_with_bak(path: Path) -> tuple[dict[MessageQueueKey, int] | None, bytes | None]:
    """``LocalFileOffsetStore.readLocalOffset`` / ``readLocalOffsetBak``: the main file, else ``.bak``.
    Returns (table or None when neither exists, main bytes when the main file is what parsed)."""
    raw = _read_bytes(path)
    main_error: OffsetFileError | None = None
    if raw is not None and raw.strip():
        try:
            return load_local_offsets(raw, path=path), raw
        except OffsetFileError as exc:
            main_error = exc
    bak = path.with_name(path.name + ".bak")
    bak_raw = _read_bytes(bak)
    if bak_raw is not None and bak_raw.strip():
        try:
            return load_local_offsets(bak_raw, path=bak), None
        except OffsetFileError as exc:
            if main_error is None:
                raise
            raise OffsetFileError(f"offset file and its backup are both unusable: {main_error}; backup: {exc}",
                                  path=path, position=main_error.position) from main_error
    if main_error is not None:
        raise main_error
    return None, None


@contextmanager
def _flock(lock_path: Path) -> Iterator[None]:
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _os_error("cannot open lock file", lock_path, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class LocalOffsetStore:
    """A BROADCASTING consumer's offsets file: ``<base_dir>/<client_id>/<group>/offsets.json``."""

    def __init__(self, base_dir: str | Path, client_id: str, group: str) -> None:
        self.dir = Path(base_dir) / client_id / group
        self.path = self.dir / "offsets.json"

    def read(self) -> dict[MessageQueueKey, int]:
        """Offsets from offsets.json, else its .bak; {} when neither exists."""
        return _load_with_bak(self.path)[0] or {}

    def read_offset(self, mq: object) -> int:
        """Offset of one queue (MessageQueueKey, tuple or MessageQueue-like), -1 when absent."""
        return self.read().get(mq_key(mq), -1)

    def persist(self, offsets: Mapping[Any, int]) -> None:
        """Overlay ``offsets`` on the file's current table (queues not given are kept) and rewrite it as
        ``MixAll.string2File`` does (.tmp fsynced, previous content to .bak, rename)."""
        updates = {mq_key(mq): check_int("offset", off, INT64_BOUNDS) for mq, off in offsets.items()}
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _os_error("cannot create offset directory", self.dir, exc) from exc
        with _flock(self.path.with_name("offsets.json.lock")):
            current, raw = _load_with_bak(self.path)
            table = dict(current or {})
            table.update(updates)
            text = dump_local_offsets(dict(sorted(table.items())))
            try:
                tmp = write_synced_tmp(self.path, text.encode("utf-8"))
                if raw is not None:
                    write_atomic(self.path.with_name(self.path.name + ".bak"), raw)
                os.replace(tmp, self.path)
                fsync_dir(self.dir)
            except OSError as exc:
                raise _os_error("cannot write offset file", self.path, exc) from exc


class LocalFileOffsetStore(_MemoryTable):
    """BROADCASTING offsets kept on this machine (``LocalFileOffsetStore``)."""

    def __init__(self, client_id: str, group: str, base_dir: str | Path | None = None) -> None:
        super().__init__()
        self.group = group
        self.file = LocalOffsetStore(default_local_offset_dir() if base_dir is None else base_dir, client_id, group)

    @property
    def path(self) -> Path:
        return self.file.path

    def load(self) -> None:
        """``load``: the file's offsets into memory (a corrupt file and backup raise OffsetFileError)."""
        for key, off in self.file.read().items():
            self.offset_table[MessageQueue(key.topic, key.broker_name, key.queue_id)] = off

    async def read_offset(self, mq: MessageQueue, type_: ReadOffsetType) -> int:
        if type_ in (ReadOffsetType.READ_FROM_MEMORY, ReadOffsetType.MEMORY_FIRST_THEN_STORE):
            off = self.memory_offset(mq)
            if off >= 0 or type_ is ReadOffsetType.READ_FROM_MEMORY:
                return off
        found = await asyncio.to_thread(self.file.read_offset, mq)
        if found >= 0:
            self.update_offset(mq, found, False)
        return found

    async def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        table = self.snapshot(mqs)
        if table:
            await asyncio.to_thread(self.file.persist, table)

    async def persist(self, mq: MessageQueue) -> None:
        """Java's LocalFileOffsetStore.persist(mq) does nothing; persisted with the next persist_all."""

    def persist_now(self) -> None:
        """Synchronous write of every in-memory offset (shutdown)."""
        table = self.snapshot()
        if table:
            self.file.persist(table)

