"""The one error tree of rocketstream.

Every error raised on purpose by this package derives from :class:`RocketStreamError` and names
what is at fault: a file and byte offset, an option and its value, or a queue and an offset range.
Lower-layer exceptions (``OSError``, ``struct.error``, ``zlib.error`` ...) are mapped to these at the
boundary with ``raise ... from exc`` so callers need to catch only this tree::

    RocketStreamError
    ├── StoreError                 a store on disk (carries path and offset)
    │   ├── NotAStoreError         the path is not a store root
    │   ├── StoreConfigError       settings conflict with the files / with the persisted settings
    │   ├── StoreLockedError       another process holds the writer lock
    │   ├── UnsupportedLayoutError a store layout we do not read or write (names the broker setting)
    │   ├── ReadOnlyStoreError     a write was attempted through a read-only handle
    │   └── CorruptStoreError      bytes on disk that do not decode (bad magic, CRC, lengths)
    ├── OffsetFileError            consumerOffset.json / offsets.json that does not parse
    ├── OptionError                a bad option value (Spark source, CLI) — names the option
    │   └── ColumnError            a DataFrame column the Spark sink cannot write — names the column
    ├── AllocationError            invalid input to a rebalance strategy
    ├── FilterExpressionError      a SQL92 filter expression that does not compile (expression, position)
    ├── DataLossError              requested offsets are gone (retention) or beyond the end
    ├── AclConfigError             a plain_acl.yml that does not load (names the file and the field)
    ├── MQClientError              client state: no route for a topic, a group registered twice, not started
    │   └── SendFailedError        every attempt of a send failed (topic, attempts; the last error is __cause__)
    └── RemotingError              the TCP remoting protocol (carries the peer address)
        ├── FrameError             bytes that are not a valid frame (length, type byte, header)
        ├── RemotingConnectError   cannot connect, or the connection closed under a request
        ├── RemotingTimeoutError   no response within the timeout
        ├── HeaderFieldError       a custom header (extFields) field missing or invalid — names it
        ├── BodyError              a request/response body that does not decode
        └── BrokerResponseError    a broker / name server answered a non-success code (code, remark)
"""

from __future__ import annotations


def _where(path: str | None, unit: str, at: int | None) -> str:
    """`` [file F, offset N]``-style suffix naming what is at fault (empty when nothing is known)."""
    parts = ([f"file {path}"] if path is not None else []) + ([f"{unit} {at}"] if at is not None else [])
    return f" [{', '.join(parts)}]" if parts else ""


class RocketStreamError(Exception):
    """Root of every error raised by rocketstream."""


class StoreError(RocketStreamError):
    """An error about a store on disk; ``path`` and ``offset`` say where, when known."""

    def __init__(self, message: str, *, path: object = None, offset: int | None = None) -> None:
        self.path = None if path is None else str(path)
        self.offset = offset
        super().__init__(message + _where(self.path, "offset", offset))


class NotAStoreError(StoreError):
    """The path does not hold a RocketMQ store (no commitlog/ directory, or not a directory)."""


class StoreConfigError(StoreError):
    """Store settings conflict with the files on disk or with the settings persisted in the store."""


class StoreLockedError(StoreError):
    """Another process already holds the store's writer lock."""


class UnsupportedLayoutError(StoreError):
    """A store layout rocketstream does not support (for reading, or only for writing): DLedger, a
    multi-path commit log, BatchConsumeQueue, RocksDB consume queues ... ``setting`` names the broker
    setting that produces the layout (``enableDLegerCommitLog=true``); the message says why."""

    def __init__(self, message: str, *, setting: str, path: object = None, writer_only: bool = False) -> None:
        self.setting = setting
        self.writer_only = writer_only
        super().__init__(f"{message} (broker setting {setting})", path=path)


class ReadOnlyStoreError(StoreError):
    """A write was attempted through a store opened read-only."""


class CorruptStoreError(StoreError):
    """Bytes on disk that cannot be decoded: wrong magic, CRC mismatch, impossible lengths."""


class OffsetFileError(RocketStreamError):
    """A consumer offset file (consumerOffset.json, offsets.json) that cannot be parsed."""

    def __init__(self, message: str, *, path: object = None, position: int | None = None) -> None:
        self.path = None if path is None else str(path)
        self.position = position
        super().__init__(message + _where(self.path, "character", position))


class OptionError(RocketStreamError, ValueError):
    """A bad option value; ``option`` names the option to fix."""

    def __init__(self, option: str, message: str, value: object = None) -> None:
        self.option = option
        self.value = value
        shown = "" if value is None else f" (got {value!r})"
        super().__init__(f"option '{option}': {message}{shown}")


class ColumnError(OptionError):
    """A column of a DataFrame written with ``format("rocketmq")`` that the sink cannot take (unknown name,
    wrong type, null body ...); ``column`` names it."""

    def __init__(self, column: str, message: str) -> None:
        self.column = column
        self.option = column
        self.value = None
        ValueError.__init__(self, f"column '{column}': {message}")


class AllocationError(RocketStreamError, ValueError):
    """Invalid input to a queue allocation strategy (empty consumer id, no queues, ...)."""


class FilterExpressionError(RocketStreamError, ValueError):
    """A SQL92 message filter that RocketMQ's ``SelectorParser`` refuses (``MQFilterException``):
    ``expression`` is the text, ``position`` the 0-based character index at fault (None when the whole
    expression is at fault)."""

    def __init__(self, expression: str, message: str, position: int | None = None) -> None:
        self.expression = expression
        self.position = position
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"invalid SQL92 filter {expression!r}{where}: {message}")


class DataLossError(RocketStreamError):
    """Offsets that can no longer be read: removed by retention, or beyond the queue's end."""

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        broker_name: str | None = None,
        queue_id: int | None = None,
        lost_from: int | None = None,
        lost_to: int | None = None,
    ) -> None:
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self.lost_from = lost_from
        self.lost_to = lost_to
        super().__init__(message)


class AclConfigError(RocketStreamError):
    """A broker ACL file (``plain_acl.yml``) that is missing, not YAML, or has a bad field; ``path`` names
    the file and ``field`` the entry at fault (``accounts[1].secretKey``), when known."""

    def __init__(self, message: str, *, path: object = None, field: str | None = None) -> None:
        self.path = None if path is None else str(path)
        self.field = field
        where = ([f"field {field}"] if field else []) + ([f"file {self.path}"] if self.path else [])
        super().__init__(message + (f" [{', '.join(where)}]" if where else ""))


class RemotingError(RocketStreamError):
    """An error of the remoting protocol; ``addr`` names the peer (``host:port``) when known."""

    def __init__(self, message: str, *, addr: str | None = None) -> None:
        self.addr = addr
        super().__init__(message + (f" [peer {addr}]" if addr else ""))


class FrameError(RemotingError):
    """Bytes that do not decode as a RocketMQ frame (RemotingCommand.decode); the connection is closed."""


class RemotingConnectError(RemotingError):
    """The peer cannot be reached, or the connection closed while a request was waiting."""


class TlsError(RemotingConnectError):
    """A TLS handshake failed (certificate not trusted, wrong host name, a peer without TLS, no client
    certificate where one is required); the message says why and ``addr`` names the peer."""


class RemotingTimeoutError(RemotingError):
    """No response to a request within its timeout; ``code`` and ``timeout_s`` say which request."""

    def __init__(self, message: str, *, addr: str | None = None, code: int | None = None,
                 timeout_s: float | None = None) -> None:
        self.code = code
        self.timeout_s = timeout_s
        super().__init__(message, addr=addr)


class HeaderFieldError(RemotingError):
    """A custom header field (extFields) is missing or does not parse; ``field`` names it."""

    def __init__(self, field: str, message: str, *, addr: str | None = None) -> None:
        self.field = field
        super().__init__(f"the custom field <{field}> {message}", addr=addr)


class BodyError(RemotingError):
    """A request or response body that does not decode (bad JSON, bad compressed form)."""


class BrokerResponseError(RemotingError):
    """A broker or name server answered a request with an error code (``MQBrokerException(code, remark)``);
    ``code`` is the response code, ``request_code`` the request that got it, ``remark`` the peer's text."""

    def __init__(self, code: int, remark: str | None, *, addr: str | None = None, request_code: int | None = None,
                 what: str | None = None) -> None:
        self.code = code
        self.remark = remark
        self.request_code = request_code
        prefix = f"{what}: " if what else ""
        super().__init__(f"{prefix}response code {code}, remark {remark!r}", addr=addr)


class MQClientError(RocketStreamError):
    """A client-side condition (``MQClientException``): no route for a topic, a producer/consumer group
    registered twice in one client instance, an operation on a client that is not running."""


class SendFailedError(MQClientError):
    """Every attempt of a send failed (``Send [n] times, still failed``); ``topic`` and ``attempts`` say
    which send, ``__cause__`` is the last attempt's error."""

    def __init__(self, message: str, *, topic: str, attempts: int) -> None:
        self.topic = topic
        self.attempts = attempts
        super().__init__(message)
