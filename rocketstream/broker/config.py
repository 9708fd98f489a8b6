"""``BrokerConfig``: the broker's settings from a broker.conf in RocketMQ's property names
(``BrokerConfig``, ``NettyServerConfig``, ``MessageStoreConfig``), read with the store's
``java.util.Properties`` parser (store/meta/config.py).

Precedence, lowest first: RocketMQ's defaults (the dataclass defaults below), the broker.conf, then
what the command line says (``--listen``, ``--namesrv``, ``--broker-name``, ``--store``:
:meth:`BrokerConfig.with_overrides`). Unknown properties are ignored, as ``MixAll.properties2Object``
ignores them; a known one whose value does not parse is refused with a StoreConfigError naming it
(RocketMQ would silently keep its default).

TLS (RocketMQ's ``TlsSystemConfig`` names, which 4.9.8 reads as ``-D`` system properties or from
``tls.config.file``; here they are broker.conf lines): ``tls.server.*`` make the broker's port serve TLS
(remoting/tls.py :class:`~rocketstream.remoting.tls.ServerTlsConfig`; no ``tls.server.mode`` means
``permissive`` when a certificate and key are given, else ``disabled``); ``tls.enable`` with ``tls.client.*``
and ``tls.test.mode.enable`` make the broker's own connections to name servers TLS
(:class:`~rocketstream.client.tls.TlsConfig`). A bad TLS setting is a StoreConfigError naming it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from rocketstream.client.tls import TLS_PROPERTIES, TlsConfig
from rocketstream.codec import HostAddress
from rocketstream.errors import OptionError, StoreConfigError
from rocketstream.remoting.server import ServerLimits
from rocketstream.remoting.tls import SERVER_TLS_PROPERTIES, ServerTlsConfig
from rocketstream.store.files.durable import os_errors
from rocketstream.store.meta.config import (
    BUILTIN_BROKER_CONF,
    DEFAULT_DELAY_LEVELS,
    StoreConfig,
    parse_properties,
    resolve_sizes,
)

__all__ = ["BrokerConfig", "PERM_READ", "PERM_WRITE", "PERM_INHERIT", "PERM_PRIORITY", "REGISTER_BROKER_TIMEOUT_S"]

# PermName
PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 0x8, 0x4, 0x2, 0x1

REGISTER_BROKER_TIMEOUT_S = 6.0      # BrokerConfig.registerBrokerTimeoutMills

_INT = re.compile(r"[+-]?\d+")

# property name -> (attribute, kind); kind: "str", "int", "bool"
_PROPERTIES: dict[str, tuple[str, str]] = {
    "brokerName": ("broker_name", "str"),
    "brokerClusterName": ("broker_cluster_name", "str"),
    "brokerId": ("broker_id", "int"),
    "brokerIP1": ("broker_ip1", "str"),
    "listenPort": ("listen_port", "int"),
    "namesrvAddr": ("namesrv_addr", "str"),
    "autoCreateTopicEnable": ("auto_create_topic_enable", "bool"),
    "autoCreateSubscriptionGroup": ("auto_create_subscription_group", "bool"),
    "longPollingEnable": ("long_polling_enable", "bool"),
    "shortPollingTimeMills": ("short_polling_time_mills", "int"),
    "messageDelayLevel": ("message_delay_level", "str"),
    "aclEnable": ("acl_enable", "bool"),
    "aclPlainFile": ("acl_plain_file", "str"),
    "defaultTopicQueueNums": ("default_topic_queue_nums", "int"),
    "flushDiskType": ("flush_disk_type", "str"),
    "brokerPermission": ("broker_permission", "int"),
    "maxTransferCountOnMessageInMemory": ("max_transfer_count_on_message_in_memory", "int"),
    "maxTransferBytesOnMessageInMemory": ("max_transfer_bytes_on_message_in_memory", "int"),
    "regionId": ("region_id", "str"),
    "traceTopicEnable": ("trace_topic_enable", "bool"),
    "msgTraceTopicName": ("msg_trace_topic_name", "str"),
    "registerNameServerPeriod": ("register_name_server_period", "int"),
    "flushConsumerOffsetInterval": ("flush_consumer_offset_interval", "int"),
    "notifyConsumerIdsChangedEnable": ("notify_consumer_ids_changed_enable", "bool"),
    "clusterTopicEnable": ("cluster_topic_enable", "bool"),
    "brokerTopicEnable": ("broker_topic_enable", "bool"),
    "flushIntervalCommitLog": ("flush_interval_commit_log", "int"),
    "syncFlushTimeout": ("sync_flush_timeout", "int"),
    "channelExpiredTimeout": ("channel_expired_timeout", "int"),
    "enablePropertyFilter": ("enable_property_filter", "bool"),
    # NettyServerConfig and our connection bounds (remoting/server.py ServerLimits)
    "writeBufferHighWaterMark": ("write_buffer_high_water_mark", "int"),
    "writeBufferLowWaterMark": ("write_buffer_low_water_mark", "int"),
    "serverChannelMaxWriteBufferSize": ("server_channel_max_write_buffer_size", "int"),
    "serverChannelMaxReceiveAheadSize": ("server_channel_max_receive_ahead_size", "int"),
    "serverMaxReceiveAheadSize": ("server_max_receive_ahead_size", "int"),
    # rocketstream's own limits (RocketMQ has none): queue counts per topic, a held pull's hold time,
    # how long auto-created topics wait to be written to topics.json and announced together
    "maxTopicQueueNums": ("max_topic_queue_nums", "int"),
    "maxPullSuspendTimeMills": ("max_pull_suspend_time_mills", "int"),
    "topicConfigFlushDelayMills": ("topic_config_flush_delay_mills", "int"),
    "transactionTimeOut": ("transaction_time_out", "int"),
    "transactionCheckMax": ("transaction_check_max", "int"),
    "transactionCheckInterval": ("transaction_check_interval", "int"),
    "rejectTransactionMessage": ("reject_transaction_message", "bool"),
}


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's settings; field names are the snake_case of RocketMQ's property names."""

    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    broker_ip1: str = "127.0.0.1"
    listen_port: int = 10911
    namesrv_addr: str | None = None                 # ";"-separated
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    acl_enable: bool = False
    acl_plain_file: str | None = None               # plain_acl.yml (acl.py: default <store>/conf/plain_acl.yml)
    default_topic_queue_nums: int = 8               # BrokerConfig.defaultTopicQueueNums (TBW102's queues)
    store_path_root_dir: Path = Path("storage")
    flush_disk_type: str = "ASYNC_FLUSH"
    broker_permission: int = PERM_READ | PERM_WRITE
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 262144
    region_id: str = "DefaultRegion"                # MixAll.DEFAULT_TRACE_REGION_ID
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    register_name_server_period: int = 30000        # ms
    flush_consumer_offset_interval: int = 5000      # ms
    notify_consumer_ids_changed_enable: bool = True
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    flush_interval_commit_log: int = 500            # ms, FlushRealTimeService's period (ASYNC_FLUSH)
    sync_flush_timeout: int = 5000                  # ms, a SYNC_FLUSH send waits this long for its flush
    channel_expired_timeout: int = 120000           # ms, ConsumerManager/ProducerManager CHANNEL_EXPIRED_TIMEOUT
    enable_property_filter: bool = False            # SQL92 subscriptions (broker/sql_filter.py)
    # what one connection may hold (remoting/server.py ServerLimits): write buffer water marks (0: Netty's
    # 64 KiB / 32 KiB, as 4.9.8 leaves them), the write buffer past which a peer that does not read is cut
    # off (0: never), frame buffers allocated whole before their bytes arrive, per connection and in all
    write_buffer_high_water_mark: int = 65536
    write_buffer_low_water_mark: int = 32768
    server_channel_max_write_buffer_size: int = 32 << 20
    server_channel_max_receive_ahead_size: int = 4 << 20
    server_max_receive_ahead_size: int = 64 << 20
    max_topic_queue_nums: int = 1024                # read/write queues a topic may have (admin 17 refuses more)
    max_pull_suspend_time_mills: int = 30000        # a held pull's cap: 20 s lite pull, 15 s push + margin
    topic_config_flush_delay_mills: int = 100       # auto-created topics: topics.json + registration batched
    transaction_time_out: int = 6000                # ms, a half message is checked back once this old
    transaction_check_max: int = 15                 # check-backs before TRANS_CHECK_MAX_TIME_TOPIC
    transaction_check_interval: int = 60000         # ms between two check passes (broker/transaction.py)
    reject_transaction_message: bool = False        # refuse half messages (NO_PERMISSION)
    # TLS: the broker's port (tls.server.*) and its own client side (tls.enable, tls.client.*); None: plain TCP
    tls_server: ServerTlsConfig | None = None
    tls_client: TlsConfig | None = None
    conf_path: Path | None = field(default=None, compare=False)
    store_config: StoreConfig | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "store_path_root_dir", Path(self.store_path_root_dir))
        if not 0 <= self.listen_port <= 65535:
            raise StoreConfigError(f"listenPort must be 0..65535, got {self.listen_port}")
        if self.short_polling_time_mills <= 0:
            raise StoreConfigError(f"shortPollingTimeMills must be > 0, got {self.short_polling_time_mills}")
        if self.default_topic_queue_nums <= 0:
            raise StoreConfigError(f"defaultTopicQueueNums must be > 0, got {self.default_topic_queue_nums}")
        try:
            self.server_limits()
        except OptionError as exc:
            raise StoreConfigError(str(exc)) from None
        for name, value in (("maxTopicQueueNums", self.max_topic_queue_nums),
                            ("maxPullSuspendTimeMills", self.max_pull_suspend_time_mills)):
            if value <= 0:
                raise StoreConfigError(f"{name} must be > 0, got {value}")
        if self.topic_config_flush_delay_mills < 0:
            raise StoreConfigError(
                f"topicConfigFlushDelayMills must be >= 0, got {self.topic_config_flush_delay_mills}")
        if self.transaction_check_interval <= 0:
            raise StoreConfigError(f"transactionCheckInterval must be > 0, got {self.transaction_check_interval}")
        if self.transaction_time_out < 0:
            raise StoreConfigError(f"transactionTimeOut must be >= 0, got {self.transaction_time_out}")

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in (self.namesrv_addr or "").split(";") if a.strip()]

    @classmethod
    def from_conf(cls, path: str | Path | None) -> BrokerConfig:
        """Settings from a broker.conf (None: RocketMQ's defaults, store settings from the built-in file)."""
        if path is None:
            store = StoreConfig.from_broker_conf(BUILTIN_BROKER_CONF) if BUILTIN_BROKER_CONF.is_file() else None
            return cls(store_config=store)
        path = Path(path)
        with os_errors("cannot read broker config", path, error=StoreConfigError):
            text = path.read_bytes().decode("latin-1")   # Properties.load(InputStream): ISO-8859-1
        props = parse_properties(text, path=path)
        kw: dict[str, object] = {"conf_path": path}
        for key, (attr, kind) in _PROPERTIES.items():
            if key not in props:
                continue
            value = props[key]
            if kind == "int":
                if _INT.fullmatch(value) is None:
                    raise StoreConfigError(f"option {key}: not an integer: {value!r}", path=path)
                kw[attr] = int(value)
            elif kind == "bool":
                kw[attr] = value.lower() == "true"   # Boolean.parseBoolean
            else:
                kw[attr] = value
        try:
            kw["tls_server"], kw["tls_client"] = tls_settings(props)
        except OptionError as exc:
            raise StoreConfigError(str(exc), path=path) from None
        store = StoreConfig.from_broker_conf(path)
        kw["store_path_root_dir"] = store.store_path_root_dir
        kw["store_config"] = store
        try:
            return cls(**kw)  # type: ignore[arg-type]  # each value was converted to its field's type above
        except StoreConfigError as exc:
            raise StoreConfigError(str(exc), path=path) from exc

    def with_overrides(self, *, store: Path | None = None, listen: tuple[str, int] | None = None,
                       namesrv_addr: str | None = None, broker_name: str | None = None) -> BrokerConfig:
        """The command line's settings over the file's (``--store``, ``--listen``, ``--namesrv``, ``--broker-name``)."""
        kw: dict[str, object] = {}
        if store is not None:
            kw["store_path_root_dir"] = Path(store)
        if listen is not None:
            kw["broker_ip1"], kw["listen_port"] = listen
        if namesrv_addr is not None:
            kw["namesrv_addr"] = namesrv_addr
        if broker_name is not None:
            kw["broker_name"] = broker_name
        return replace(self, **kw)  # type: ignore[arg-type]  # keys are field names with checked types

    def server_limits(self) -> ServerLimits:
        """The broker's connection bounds (remoting/server.py)."""
        return ServerLimits(write_buffer_high_water_mark=self.write_buffer_high_water_mark,
                            write_buffer_low_water_mark=self.write_buffer_low_water_mark,
                            max_write_buffer=self.server_channel_max_write_buffer_size,
                            max_receive_ahead=self.server_channel_max_receive_ahead_size,
                            max_receive_ahead_total=self.server_max_receive_ahead_size)

    def message_store_config(self) -> StoreConfig:
        """The store settings for this broker's store: the broker.conf's store options, this broker's
        name, root and store host (``brokerIP1:listenPort``, what clients reach and offsetMsgIds carry);
        an existing store keeps its own mapped-file sizes."""
        base = self.store_config or StoreConfig()
        root = self.store_path_root_dir.expanduser()
        if not root.is_absolute():
            root = Path(os.getcwd()) / root
        cfg = replace(base, store_path_root_dir=root, broker_name=self.broker_name,
                      flush_disk_type=self.flush_disk_type, message_delay_level=self.message_delay_level,
                      store_host=HostAddress(self.broker_ip1, self.listen_port),
                      max_transfer_count_on_message_in_memory=self.max_transfer_count_on_message_in_memory,
                      max_transfer_bytes_on_message_in_memory=self.max_transfer_bytes_on_message_in_memory)
        if base.store_path_root_dir.resolve() != root.resolve():
            # another store than the broker.conf's: retention and layout settings belong to that one
            cfg = replace(cfg, file_reserved_time_hours=None, delete_when=None, layout_settings=(), conf_path=None)
        return resolve_sizes(root, cfg, explicit=False)

    @property
    def tls_mode(self) -> str:
        """``tls.server.mode`` in force: disabled, permissive or enforcing."""
        return str(self.tls_server.mode) if self.tls_server is not None else "disabled"

    def describe(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("store_config",)}


_CLIENT_TLS_NAMES = frozenset(k.lower() for k in (*TLS_PROPERTIES, "tls.enable"))


def tls_settings(props: dict[str, str]) -> tuple[ServerTlsConfig | None, TlsConfig | None]:
    """The server and client TLS settings of a broker.conf's (or a name server's) properties; (None, None)
    when it has none. Other ``tls.*`` names 4.9.8 knows (``tls.client.authServer``, ``tls.server.authClient``,
    ``tls.config.file``, ...) are ignored, as unknown properties are; an unknown ``tls.server.*`` name is not
    (a misspelt server setting would silently leave the port plain)."""
    server = {k: v for k, v in props.items() if k in SERVER_TLS_PROPERTIES}
    for key in props:
        if key.lower().startswith("tls.server.") and key not in SERVER_TLS_PROPERTIES \
                and key != "tls.server.authClient":
            raise OptionError(key, "is not a TLS server setting; valid: " + ", ".join(SERVER_TLS_PROPERTIES))
    client = {k: v for k, v in props.items() if k.lower() in _CLIENT_TLS_NAMES}
    server_tls = ServerTlsConfig.from_properties(server) if server else None
    client_tls = TlsConfig.from_properties(client) if client.get("tls.enable", "false").strip().lower() == "true" \
        else None
    return server_tls, client_tls
