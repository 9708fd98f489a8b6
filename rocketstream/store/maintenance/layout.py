"""What a store root holds besides ``commitlog/`` + ``consumequeue/``, and what we do with each layout.

A real broker's store may hold layouts we neither read nor write (docs/store-format.md, "Layouts we
refuse"). Mistaking one for damage or emptiness destroys data, so ``check`` refuses them before
anything is opened, with an ``UnsupportedLayoutError`` naming the path and the broker setting that produced it:

=============================  ==================================  =======  =======
layout (on disk)               broker setting                      read     write
=============================  ==================================  =======  =======
``dledger-<id>/``              ``enableDLegerCommitLog=true``      refused  refused
commit-log files with a gap,   ``storePathCommitLog=a,b`` /        refused  refused
other commit-log directories   ``readOnlyCommitLogStorePaths``
``batchconsumequeue/``         5.x ``BatchConsumeQueue`` topics    refused  refused
``consumequeue/CURRENT`` ...,  ``storeType=defaultRocksDB``        refused  refused
``config/rdb``                 (5.2+ RocksDB queues / config)
``consumequeue_ext/``          ``enableConsumeQueueExt=true``      yes      refused
``consumequeue/%LMQ%...``      ``enableLmq`` /                     yes      refused
                               ``enableMultiDispatch``
``index/``                     ``messageIndexEnable`` (default)    yes      yes, see below
=============================  ==================================  =======  =======

* Multi-path commit logs are refused rather than read as a union: ``MultiPathMappedFileQueue`` places
  file *i* in directory ``i % n`` (split on ``MessageStoreConfig.MULTI_PATH_SPLITTER``, ``,`` unless the
  JVM property ``rocketmq.broker.multiPathSplitter`` changes it), and a store copied by path rarely
  carries the other directories. Any ``storePathCommitLog`` other than ``<root>/commitlog`` is refused.
* ``consumequeue_ext/``: a unit's tagsCode may be an ext address (``ConsumeQueueExt.isExtAddr``); reading
  the queues is safe, but our dispatch neither writes ext units nor truncates the ext files in step
  with the queues (``ConsumeQueue.truncateDirtyLogicFiles``), so a writer would leave them disagreeing.
* LMQ: Java dispatches a record carrying ``INNER_MULTI_DISPATCH`` into every ``%LMQ%`` queue it names
  (4.9.8 ``DefaultMessageStore.checkMultiDispatchQueue`` -> ``ConsumeQueue.multiDispatchLmqQueue``); our
  dispatch writes only the record's own queue, so re-dispatch after a crash would leave the LMQ queues behind.
* Detection works from the files alone; a broker.conf (``StoreConfig.layout_settings``) adds the
  settings, so ``enableDLegerCommitLog=true`` is refused even before the broker wrote anything.

**index/** is in every real broker's store (``messageIndexEnable`` defaults to true); a writer continues it
with files/index_writer.py (``IndexService.buildIndex`` byte for byte, in the existing files' geometry),
so a Java broker started after our clean close reads it as its own (docs/store-format.md, "Index files").
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from rocketstream.errors import NotAStoreError, UnsupportedLayoutError
from rocketstream.store.meta.config import StoreConfig, data_files

log = logging.getLogger(__name__)

LMQ_PREFIX = "%LMQ%"            # MixAll.LMQ_PREFIX
MULTI_PATH_SPLITTER = ","       # MessageStoreConfig.MULTI_PATH_SPLITTER default
_ROCKSDB_MARKERS = ("CURRENT", "IDENTITY")


def _entries(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []


@dataclass(frozen=True)
class Layout:
    """What ``scan`` found under a store root (paths present, or None / empty)."""

    root: Path
    commitlog: bool
    consumequeue: bool                   # consumequeue/ with entries
    checkpoint: bool
    dledger: tuple[Path, ...]
    batch_consume_queue: Path | None
    rocksdb_consume_queue: Path | None   # the RocksDB file found in consumequeue/
    rocksdb_config: Path | None
    consume_queue_ext: Path | None
    lmq: tuple[Path, ...]
    index: Path | None
    commit_log_gap: tuple[Path, int] | None   # (file after the gap, offset expected before it)

    @property
    def has_store_data(self) -> bool:
        """Anything a broker (or we) wrote: a root holding this is never "created" over."""
        return bool(self.commitlog_files or self.consumequeue or self.checkpoint or self.dledger
                    or self.batch_consume_queue or self.rocksdb_config or self.consume_queue_ext or self.index)

    @property
    def commitlog_files(self) -> bool:
        return bool(data_files(self.root / "commitlog"))


def scan(root: Path) -> Layout:
    cq_dir = root / "consumequeue"
    cq_names = _entries(cq_dir)
    rocks = next((cq_dir / n for n in cq_names
                  if (n in _ROCKSDB_MARKERS or n.startswith(("MANIFEST-", "OPTIONS-")) or n.endswith(".sst"))
                  and (cq_dir / n).is_file()), None)
    batch = root / "batchconsumequeue"
    ext = root / "consumequeue_ext"
    index = root / "index"
    return Layout(
        root=root,
        commitlog=(root / "commitlog").is_dir(),
        consumequeue=bool(cq_names),
        checkpoint=(root / "checkpoint").is_file(),
        dledger=tuple(root / n for n in _entries(root) if n.startswith("dledger-") and (root / n).is_dir()),
        batch_consume_queue=batch if _entries(batch) else None,
        rocksdb_consume_queue=rocks,
        rocksdb_config=(root / "config" / "rdb") if (root / "config" / "rdb").exists() else None,
        consume_queue_ext=ext if _entries(ext) else None,
        lmq=tuple(cq_dir / n for n in cq_names if n.startswith(LMQ_PREFIX)),
        index=index if index.is_dir() else None,
        commit_log_gap=_commit_log_gap(root / "commitlog"),
    )


def _commit_log_gap(directory: Path) -> tuple[Path, int] | None:
    files = data_files(directory)
    if len(files) < 2:
        return None
    try:   # files are created full length: a short (damaged) one is a length error for the loader, not a gap
        size = max(f.stat().st_size for f in files)
    except FileNotFoundError:   # retention of a live writer: the reader's load deals with it
        return None
    if size <= 0:
        return None
    for before, after in zip(files, files[1:], strict=False):   # consecutive pairs
        if int(after.name) != int(before.name) + size:
            return after, int(before.name) + size
    return None


def _true(value: str | None) -> bool:
    return value is not None and value.lower() == "true"   # Boolean.parseBoolean


def check(layout: Layout, config: StoreConfig, *, read_only: bool) -> None:
    """Raise UnsupportedLayoutError for a layout (on disk or in ``config``'s broker settings) that the
    open mode cannot handle. Readers get the read-refused layouts only."""
    root = layout.root
    conf = f" in {config.conf_path}" if config.conf_path else ""

    if layout.dledger or _true(config.setting("enableDLegerCommitLog")):
        where = layout.dledger[0] if layout.dledger else config.conf_path or root
        raise UnsupportedLayoutError(
            "a DLedger store: its commit log is dledger-<selfId>/data/ with DLedger entry framing, not "
            "commitlog/; rocketstream reads and writes only the default commit log",
            setting="enableDLegerCommitLog=true", path=where)
    rocks_setting = config.setting("storeType")
    if layout.rocksdb_consume_queue or layout.rocksdb_config or (rocks_setting or "").lower() == "defaultrocksdb":
        where = layout.rocksdb_consume_queue or layout.rocksdb_config or config.conf_path or root
        raise UnsupportedLayoutError(
            "RocksDB consume queues or config (RocketMQ 5.2+): queue units and offsets live in a RocksDB "
            "database, not in consumequeue/<topic>/<queue> files and config/*.json; rocketstream cannot read "
            "or write them", setting="storeType=defaultRocksDB", path=where)
    if layout.batch_consume_queue:
        topics = ", ".join(_entries(layout.batch_consume_queue)[:5])
        raise UnsupportedLayoutError(
            f"5.x BatchConsumeQueue topics ({topics}): one record holds several queue offsets and its "
            "46-byte units live in batchconsumequeue/; dispatching them into consumequeue/ would corrupt the "
            "queues and reading would miss them", setting="queue.type=BatchCQ (topic attribute)",
            path=layout.batch_consume_queue)
    paths = config.setting("storePathCommitLog")
    if paths is not None and paths.strip():
        dirs = [p for p in paths.strip().split(MULTI_PATH_SPLITTER) if p]
        if len(dirs) > 1 or Path(dirs[0]).resolve() != (root / "commitlog").resolve():
            raise UnsupportedLayoutError(
                f"the commit log is configured{conf} at {paths!r}, not {root / 'commitlog'}; several "
                "directories hold the files round-robin by index (MultiPathMappedFileQueue), which "
                "rocketstream does not read or write", setting=f"storePathCommitLog={paths}",
                path=config.conf_path or root)
    ro_paths = config.setting("readOnlyCommitLogStorePaths")
    if ro_paths is not None and ro_paths.strip():
        raise UnsupportedLayoutError(
            f"older commit-log files are kept in other directories ({ro_paths!r}){conf}; reading only "
            "commitlog/ would treat them as deleted", setting=f"readOnlyCommitLogStorePaths={ro_paths}",
            path=config.conf_path or root)
    if layout.commit_log_gap is not None:
        after, expected = layout.commit_log_gap
        raise UnsupportedLayoutError(
            f"commit-log files are not contiguous: no file at offset {expected} before {after.name}. Either "
            "files were lost, or the broker spreads the commit log over several directories (files "
            "round-robin by index, MultiPathMappedFileQueue), which rocketstream does not support",
            setting="storePathCommitLog=<dir1>,<dir2>", path=after)
    if read_only:
        return
    if layout.consume_queue_ext or _true(config.setting("enableConsumeQueueExt")):
        raise UnsupportedLayoutError(
            "consume queues with ConsumeQueueExt files (consumequeue_ext/): tagsCode values can be ext "
            "addresses and our writer neither writes ext units nor truncates the ext files with the "
            "queues; open the store read-only to read it", setting="enableConsumeQueueExt=true",
            path=layout.consume_queue_ext or config.conf_path or root, writer_only=True)
    if layout.lmq or _true(config.setting("enableLmq")) or _true(config.setting("enableMultiDispatch")):
        setting = "enableLmq=true / enableMultiDispatch=true"
        raise UnsupportedLayoutError(
            "LMQ queues (%LMQ%...): the broker dispatches one record into several LMQ queues "
            "(INNER_MULTI_DISPATCH) and our dispatch writes only the record's own queue, so a writer "
            "would leave them behind; open the store read-only to read it", setting=setting,
            path=layout.lmq[0] if layout.lmq else config.conf_path or root, writer_only=True)


def refuse_create(layout: Layout) -> None:
    """A writer asked to create a store where there is no commitlog/: refuse when the root already holds
    store data (a DLedger store, queues whose commit log lives elsewhere ...), whatever ``create`` says."""
    if not layout.has_store_data:
        return
    found = [name for name, there in (("consumequeue/", layout.consumequeue), ("checkpoint", layout.checkpoint),
                                      ("index/", layout.index), ("consumequeue_ext/", layout.consume_queue_ext))
             if there]
    raise NotAStoreError(f"refusing to create a store here: it has no commitlog/ but holds {', '.join(found)} "
                         "(a broker's store whose commit log lives elsewhere, storePathCommitLog, or was "
                         "removed); creating one would discard its queues", path=layout.root)


# --- index/ ------------------------------------------------------------------------------------
def index_files(root: Path) -> list[Path]:
    """Files of ``index/`` in IndexService.load's order (names sorted)."""
    directory = root / "index"
    return [directory / n for n in _entries(directory) if (directory / n).is_file()]
