"""Store settings: the ``StoreConfig`` value object, broker.conf parsing, and the sizes persisted
in ``config/rocketstream.json`` so a store cannot be reopened with other mapped-file sizes.

Size resolution at open (``resolve_sizes``), per dimension (commit log, consume queue):

* persisted value (``config/rocketstream.json``), else the length of the existing files, else the
  requested value (the caller's ``StoreConfig``; RocketMQ's defaults when no config was given);
* persisted and detected disagree -> the files were damaged or swapped: ``CorruptStoreError``;
* the caller passed an explicit config whose size differs from the store's -> ``StoreConfigError``.

Retention settings (``fileReservedTime``, ``deleteWhen``) are *not* in a store (docs/store-format.md): they live in
the broker.conf of the broker that owns it. ``file_reserved_time_hours`` is therefore None unless a
caller or a broker.conf sets it; our own stores then use RocketMQ's default of 72 h, a store written by
a real broker (no ``config/rocketstream.json``) gets no automatic retention at all (see message_store).

broker.conf is read as Java's ``BrokerStartup`` reads it: ``java.util.Properties.load(InputStream)``
(ISO-8859-1 bytes, ``key=value`` / ``key: value`` / ``key value``, ``#``/``!`` comments, backslash
escapes and continuation lines), values untrimmed at the end. ``MixAll.properties2Object`` silently
ignores a value its setter cannot parse (``fileReservedTime=48 `` with a trailing blank keeps the
default); we refuse such a value with a StoreConfigError naming it instead of guessing.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from rocketstream.codec import (
    CQ_UNIT_SIZE,
    DELAY_LEVELS_MS,
    HostAddress,
    parse_delay_levels,
)
from rocketstream.errors import CorruptStoreError, StoreConfigError
from rocketstream.fsutil import write_atomic
from rocketstream.store.files.durable import os_errors

DEFAULT_COMMIT_LOG_FILE_SIZE = 1073741824
DEFAULT_CONSUME_QUEUE_FILE_SIZE = 6000000
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
SETTINGS_FILE = "config/rocketstream.json"
FORMAT_VERSION = 1
FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
# A record needs 91 bytes at least plus room for the 8-byte blank; below this rolling degenerates.
MIN_COMMIT_LOG_FILE_SIZE = 256
# MessageStoreConfig.fileReservedTime's default, used by our own stores when nothing else is configured.
DEFAULT_FILE_RESERVED_TIME_HOURS = 72.0
# broker.conf settings that select a store layout (layout.py checks them against the files).
LAYOUT_SETTINGS = ("storePathCommitLog", "readOnlyCommitLogStorePaths", "enableDLegerCommitLog", "storeType",
                   "enableConsumeQueueExt", "enableLmq", "enableMultiDispatch")
# Integer.parseInt / Double.parseDouble accept no blanks; Python's int()/float() would.
_JAVA_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")


@dataclass(frozen=True)
class StoreConfig:
    """Store settings in RocketMQ's meaning (property names in ``from_broker_conf``)."""

    store_path_root_dir: Path = Path("storage")
    broker_name: str = "broker-a"
    mapped_file_size_commit_log: int = DEFAULT_COMMIT_LOG_FILE_SIZE
    mapped_file_size_consume_queue: int = DEFAULT_CONSUME_QUEUE_FILE_SIZE
    flush_disk_type: str = "ASYNC_FLUSH"
    # None: not configured (our own stores use DEFAULT_FILE_RESERVED_TIME_HOURS, foreign stores none)
    file_reserved_time_hours: float | None = None
    delete_when: str | None = None
    check_crc_on_recover: bool = True
    compress_msg_body_over: int = 4096
    max_message_size: int = 4194304
    store_host: HostAddress = HostAddress("127.0.0.1", 10911)
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    # getMessage limits (DefaultMessageStore.getMessage / isTheBatchFull); we always apply the "in memory" limits.
    max_transfer_bytes_on_message_in_memory: int = 262144
    max_transfer_count_on_message_in_memory: int = 32
    max_filter_message_bytes: int = 16000
    default_topic_queue_nums: int = 4
    # index/ (IndexService): messageIndexEnable; maxHashSlotNum / maxIndexNum, None = not configured (new
    # index files then take the existing files' geometry, else RocketMQ's 5,000,000 / 20,000,000)
    message_index_enable: bool = True
    max_hash_slot_num: int | None = None
    max_index_num: int | None = None
    # the LAYOUT_SETTINGS a broker.conf gave, as (key, value) pairs; conf_path: where they came from
    layout_settings: tuple[tuple[str, str], ...] = ()
    conf_path: Path | None = field(default=None, compare=False)
    delay_levels_ms: tuple[int, ...] = field(default=DELAY_LEVELS_MS, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "store_path_root_dir", Path(self.store_path_root_dir))
        if self.flush_disk_type not in FLUSH_TYPES:
            raise StoreConfigError(f"flushDiskType must be one of {FLUSH_TYPES}, got {self.flush_disk_type!r}")
        if self.mapped_file_size_commit_log < MIN_COMMIT_LOG_FILE_SIZE:
            raise StoreConfigError(f"mappedFileSizeCommitLog must be >= {MIN_COMMIT_LOG_FILE_SIZE}, "
                                   f"got {self.mapped_file_size_commit_log}")
        cq = self.mapped_file_size_consume_queue
        if cq < CQ_UNIT_SIZE or cq % CQ_UNIT_SIZE:
            raise StoreConfigError(f"mappedFileSizeConsumeQueue must be a positive multiple of {CQ_UNIT_SIZE}, "
                                   f"got {cq}")
        for name, value in (("maxHashSlotNum", self.max_hash_slot_num), ("maxIndexNum", self.max_index_num)):
            if value is not None and not 0 < value < 2**31:
                raise StoreConfigError(f"{name} must be a positive int, got {value}")
        if self.message_delay_level != DEFAULT_DELAY_LEVELS:
            object.__setattr__(self, "delay_levels_ms", parse_delay_levels(self.message_delay_level))

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC_FLUSH"

    @property
    def retention_configured(self) -> bool:
        """True when fileReservedTime or deleteWhen was given (by a caller or a broker.conf)."""
        return self.file_reserved_time_hours is not None or self.delete_when is not None

    @property
    def reserved_hours(self) -> float:
        """fileReservedTime in hours, RocketMQ's default 72 when not configured."""
        hours = self.file_reserved_time_hours
        return DEFAULT_FILE_RESERVED_TIME_HOURS if hours is None else hours

    def setting(self, key: str) -> str | None:
        """The value a broker.conf gave for one of LAYOUT_SETTINGS, or None."""
        return dict(self.layout_settings).get(key)

    def without_broker_settings(self, root: Path, broker_name: str) -> StoreConfig:
        """This config for another store root: the sizes and client-side options stay, the settings that
        belong to the configured broker's store (retention, layout, index) do not."""
        return replace(self, store_path_root_dir=Path(root), broker_name=broker_name,
                       file_reserved_time_hours=None, delete_when=None, layout_settings=(), conf_path=None,
                       message_index_enable=True, max_hash_slot_num=None, max_index_num=None)

    @classmethod
    def from_broker_conf(cls, path: str | Path) -> StoreConfig:
        """Read RocketMQ property names from a broker.conf; unknown keys are ignored (broker options).

        A relative ``storePathRootDir`` is resolved against the conf file's parent's parent (the
        repository root when the file is ``<repo>/conf/broker.conf``), or against the working directory
        for the built-in defaults (:data:`BUILTIN_BROKER_CONF`).
        """
        path = Path(path)
        with os_errors("cannot read broker config", path, error=StoreConfigError):
            text = path.read_bytes().decode("latin-1")   # Properties.load(InputStream): ISO-8859-1
        props = parse_properties(text, path=path)
        kw: dict[str, object] = {"conf_path": path}

        def number(key: str, kind: type[int] = int) -> int:   # every option read here is a Java int or long
            value = props[key]
            if _JAVA_NUMBER.fullmatch(value) is None or (kind is int and "." in value):
                raise StoreConfigError(f"option {key}: not a number: {value!r} (RocketMQ ignores such a value "
                                       "and keeps its default; write the number alone)", path=path)
            return kind(value)

        if "storePathRootDir" in props:
            root = Path(os.path.expanduser(props["storePathRootDir"]))
            base = Path.cwd() if path.resolve() == BUILTIN_BROKER_CONF else path.resolve().parent.parent
            kw["store_path_root_dir"] = root if root.is_absolute() else base / root
        if "brokerName" in props:
            kw["broker_name"] = props["brokerName"]
        for key, attr, kind in (("mappedFileSizeCommitLog", "mapped_file_size_commit_log", int),
                                ("mappedFileSizeConsumeQueue", "mapped_file_size_consume_queue", int),
                                ("fileReservedTime", "file_reserved_time_hours", int),   # an int in MessageStoreConfig
                                ("compressMsgBodyOverHowmuch", "compress_msg_body_over", int),
                                ("maxMessageSize", "max_message_size", int),
                                ("maxTransferBytesOnMessageInMemory", "max_transfer_bytes_on_message_in_memory", int),
                                ("maxTransferCountOnMessageInMemory", "max_transfer_count_on_message_in_memory", int),
                                ("maxHashSlotNum", "max_hash_slot_num", int),
                                ("maxIndexNum", "max_index_num", int)):
            if key in props:
                kw[attr] = number(key, kind)
        if "deleteWhen" in props:
            kw["delete_when"] = props["deleteWhen"]
        kw["layout_settings"] = tuple((k, props[k]) for k in LAYOUT_SETTINGS if k in props)
        if "flushDiskType" in props:
            kw["flush_disk_type"] = props["flushDiskType"]
        if "messageIndexEnable" in props:
            kw["message_index_enable"] = props["messageIndexEnable"].lower() == "true"
        if "checkCRCOnRecover" in props:
            kw["check_crc_on_recover"] = props["checkCRCOnRecover"].lower() == "true"
        if "messageDelayLevel" in props:
            kw["message_delay_level"] = props["messageDelayLevel"]
        host = props.get("brokerIP1", "127.0.0.1")
        port = number("listenPort") if "listenPort" in props else 10911
        kw["store_host"] = HostAddress(host, port)
        try:
            # kw maps field names to values of several types, each checked above: mypy cannot pair them
            return cls(**kw)  # type: ignore[arg-type]
        except StoreConfigError as exc:
            raise StoreConfigError(str(exc), path=path) from exc


CONF_ENV = "ROCKETSTREAM_CONF"   # what ``rocketstream --conf FILE`` sets, as the broker's ``-c`` does
# Shipped inside the package (a regular ``pip install`` has no repository checkout to look in).
BUILTIN_BROKER_CONF = (Path(__file__).resolve().parent.parent.parent / "defaults" / "broker.conf")


def default_broker_conf() -> Path:
    """The broker.conf in force, found the way a RocketMQ broker finds its config: the file named by
    ``--conf`` / ``$ROCKETSTREAM_CONF`` (which must exist), else ``./conf/broker.conf`` in the working
    directory, else the built-in defaults shipped with the package."""
    named = os.environ.get(CONF_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise StoreConfigError(f"broker config named by {CONF_ENV} / --conf does not exist", path=path)
        return path
    local = Path.cwd() / "conf" / "broker.conf"
    if local.is_file():
        return local
    if BUILTIN_BROKER_CONF.is_file():
        return BUILTIN_BROKER_CONF
    raise StoreConfigError(f"no broker config: no {local} and no built-in {BUILTIN_BROKER_CONF}")


def writer_config(store: str | Path) -> StoreConfig:
    """Settings for writing to ``store``: the broker.conf in force when it configures this very store
    (sizes that conflict with its files are then refused); for any other store, broker.conf's sizes only
    for a new one (an existing one keeps its own) and the store directory's name as broker name —
    retention and layout settings belong to the configured store, not to this one. RocketMQ's
    defaults when there is no broker.conf at all."""
    store = Path(store)
    try:
        conf = default_broker_conf()
    except StoreConfigError:
        return StoreConfig(store_path_root_dir=store, broker_name=default_broker_name(store))
    cfg = StoreConfig.from_broker_conf(conf)
    if Path(cfg.store_path_root_dir).resolve() == store.resolve():
        return cfg
    return resolve_sizes(store, cfg.without_broker_settings(store, default_broker_name(store)), explicit=False)


def default_broker_name(root: str | Path) -> str:
    """The broker name of a store opened by path: conf/broker.conf's ``brokerName`` when ``root`` is the
    store that file configures, else the store root directory's name. A missing broker.conf is fine; a
    broken one raises StoreConfigError."""
    config = broker_conf_for(root)
    return config.broker_name if config is not None else Path(root).resolve().name


_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "f": "\f"}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """``java.util.Properties.LineReader``: (first line number, logical line) pairs.

    Natural lines end at \\n, \\r or \\r\\n. Leading blanks are skipped; a line whose first non-blank
    character is ``#`` or ``!`` is a comment (even when it ends with a backslash). A line ending in an
    odd number of backslashes continues on the next one, whose leading blanks are skipped (there a
    ``#`` is an ordinary character). Blank lines are skipped.
    """
    out: list[tuple[int, str]] = []
    natural = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    buf: list[str] = []
    start = 0
    for number, line in enumerate(natural, 1):
        stripped = line.lstrip(_BLANKS)
        if not buf:
            if not stripped or stripped[0] in "#!":
                continue
            start = number
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2:
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        out.append((start, "".join(buf)))
        buf = []
    if buf:   # a continuation at end of input ends the line (LineReader at EOF)
        out.append((start, "".join(buf)))
    return out


def _unescape(raw: str, *, path: Path | None, line: int) -> str:
    """``Properties.loadConvert``: ``\\uXXXX``, ``\\t \\r \\n \\f``, any other ``\\c`` is ``c``."""
    if "\\" not in raw:
        return raw
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        i += 1
        if c != "\\" or i >= n:
            out.append(c)
            continue
        c = raw[i]
        i += 1
        if c == "u":
            digits = raw[i:i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise StoreConfigError(f"line {line}: malformed \\uxxxx escape {raw[i - 2:i + 4]!r} "
                                       "(RocketMQ's broker refuses to start on it)", path=path)
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def parse_properties(text: str, *, path: Path | None = None) -> dict[str, str]:
    """``java.util.Properties.load`` semantics (``load0``): the key ends at the first unescaped ``=``,
    ``:`` or blank; blanks and one ``=``/``:`` after it are skipped; the rest is the value, trailing
    blanks included. Later keys win."""
    out: dict[str, str] = {}
    for line_no, line in _logical_lines(text):
        key_len, value_start, has_sep, backslash = 0, len(line), False, False
        while key_len < len(line):
            c = line[key_len]
            if c in "=:" and not backslash:
                value_start, has_sep = key_len + 1, True
                break
            if c in _BLANKS and not backslash:
                value_start = key_len + 1
                break
            backslash = (not backslash) if c == "\\" else False
            key_len += 1
        while value_start < len(line):
            c = line[value_start]
            if c not in _BLANKS:
                if not has_sep and c in "=:":
                    has_sep = True
                else:
                    break
            value_start += 1
        key = _unescape(line[:key_len], path=path, line=line_no)
        out[key] = _unescape(line[value_start:], path=path, line=line_no)
    return out


def broker_conf_for(root: str | Path) -> StoreConfig | None:
    """conf/broker.conf's settings when its ``storePathRootDir`` is ``root``, else None (a missing
    broker.conf is fine; a broken one raises StoreConfigError)."""
    try:
        conf = default_broker_conf()
    except StoreConfigError:
        return None
    config = StoreConfig.from_broker_conf(conf)
    if Path(config.store_path_root_dir).resolve() == Path(root).resolve():
        return config
    return None


# --- persisted sizes --------------------------------------------------------------------------
def load_settings(root: Path) -> dict[str, int] | None:
    path = root / SETTINGS_FILE
    raw = None
    with os_errors("cannot read store settings", path, error=StoreConfigError, missing_ok=True):
        raw = path.read_text(encoding="utf-8")
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        out = {k: int(data[k]) for k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue")}
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreConfigError(f"store settings file does not parse: {exc}", path=path) from exc
    return out


def save_settings(root: Path, config: StoreConfig) -> None:
    path = root / SETTINGS_FILE
    text = json.dumps({"formatVersion": FORMAT_VERSION,
                       "mappedFileSizeCommitLog": config.mapped_file_size_commit_log,
                       "mappedFileSizeConsumeQueue": config.mapped_file_size_consume_queue}, indent=2)
    with os_errors("cannot write store settings", path):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, (text + "\n").encode("utf-8"))


def data_files(directory: Path) -> list[Path]:
    """The 20-digit files of a directory, without a zero-length last one (a crash while creating it:
    RocketMQ 5.x's MappedFileQueue.doLoad deletes it, mapped_file skips or removes it)."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    files = [directory / n for n in sorted(names) if n.isdigit() and len(n) == 20]
    if files:
        try:
            if files[-1].stat().st_size == 0:
                files.pop()
        except FileNotFoundError:
            files.pop()
    return files


def _detect(files: list[Path], what: str) -> int | None:
    """The common length of ``files``; a file of another length is damage (CorruptStoreError)."""
    first: tuple[Path, int] | None = None   # the first file that exists, and its length
    for f in files:
        try:
            n = f.stat().st_size
        except FileNotFoundError:  # deleted by a live writer's retention meanwhile
            continue
        if first is None:
            first = (f, n)
        elif n != first[1]:
            raise CorruptStoreError(f"{what} file has length {n} but {first[0].name} has {first[1]}; "
                                    "all files of a queue must have the same length", path=f)
    return None if first is None else first[1]


def _cq_files(root: Path, *, first_only: bool = False) -> list[Path]:
    """Every consume-queue file, or (``first_only``) the first one found."""
    base = root / "consumequeue"
    out: list[Path] = []
    try:
        topics = sorted(os.listdir(base))
    except (FileNotFoundError, NotADirectoryError):
        return out
    for topic in topics:
        try:
            queues = os.listdir(base / topic)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for q in sorted(queues):
            out += data_files(base / topic / q)
            if first_only and out:
                return out[:1]
    return out


def resolve_sizes(root: Path, config: StoreConfig, *, explicit: bool, read_only: bool = False) -> StoreConfig:
    """Return ``config`` with the store's mapped-file sizes (module docstring gives the rules).

    ``read_only``: the consume-queue size is detected from the first consume-queue file only, not by a
    stat of every file of every queue (a reader opens the store once per Spark task); every file a reader
    maps is still checked against that size (``MappedFile``: CorruptStoreError naming the file)."""
    persisted = load_settings(root) or {}
    detected = {"mappedFileSizeCommitLog": _detect(data_files(root / "commitlog"), "commit-log"),
                "mappedFileSizeConsumeQueue": _detect(_cq_files(root, first_only=read_only), "consume-queue")}
    requested = {"mappedFileSizeCommitLog": config.mapped_file_size_commit_log,
                 "mappedFileSizeConsumeQueue": config.mapped_file_size_consume_queue}
    chosen: dict[str, int] = {}
    for key in requested:
        p, d, r = persisted.get(key), detected[key], requested[key]
        if p is not None and d is not None and p != d:
            raise CorruptStoreError(f"files have length {d} but the store was created with {key}={p}",
                                    path=root / SETTINGS_FILE)
        have = p if p is not None else d
        if have is not None and explicit and r != have:
            raise StoreConfigError(f"store uses {key}={have} but the configuration asks for {r}; "
                                   "open it without a config (sizes are detected) or use the same sizes",
                                   path=root)
        chosen[key] = have if have is not None else r
    try:
        return replace(config, mapped_file_size_commit_log=chosen["mappedFileSizeCommitLog"],
                       mapped_file_size_consume_queue=chosen["mappedFileSizeConsumeQueue"])
    except StoreConfigError as exc:
        raise StoreConfigError(f"store files have unusable sizes: {exc}", path=root) from exc
