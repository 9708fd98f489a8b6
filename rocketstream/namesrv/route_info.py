"""The name server's routing tables (``RouteInfoManager``).

* ``topic_queue_table``   topic -> brokerName -> :class:`QueueData` (from the masters' TopicConfigs)
* ``broker_addr_table``   brokerName -> :class:`BrokerData` (cluster, brokerId -> address)
* ``cluster_addr_table``  cluster -> brokerNames
* ``broker_live_table``   brokerAddr -> :class:`BrokerLiveInfo` (last registration, DataVersion, channel)
* ``filter_server_table`` brokerAddr -> filter server addresses

Brokers re-register every 30 s; a broker not heard from for ``broker_expiry_s`` (120 s,
``BROKER_CHANNEL_EXPIRED_TIME``) is dropped by :meth:`scan_not_active_broker`, and a broker whose
connection closes is dropped at once (:meth:`on_channel_destroy`, ``BrokerHousekeepingService``).
Everything runs on the server's event loop, so no lock is needed (Java holds a ReadWriteLock).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["RouteInfoManager", "QueueData", "BrokerData", "BrokerLiveInfo", "TopicConfig", "DataVersion",
           "MASTER_ID", "BROKER_CHANNEL_EXPIRED_S", "PERM_READ", "PERM_WRITE"]

log = logging.getLogger("rocketstream.namesrv")

MASTER_ID = 0                       # MixAll.MASTER_ID
BROKER_CHANNEL_EXPIRED_S = 120.0    # RouteInfoManager.BROKER_CHANNEL_EXPIRED_TIME
PERM_READ, PERM_WRITE = 0x4, 0x2    # PermName


@dataclass(frozen=True)
class DataVersion:
    """``DataVersion``: equal when timestamp and counter are equal (``DataVersion.equals``)."""

    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict:
        return {"counter": self.counter, "timestamp": self.timestamp}


@dataclass(frozen=True)
class TopicConfig:
    """The fields of a broker's ``TopicConfig`` the name server keeps."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0


@dataclass(frozen=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict:
        return {"brokerName": self.broker_name, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}


@dataclass
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        # HashMap<Long, String>: int keys, written bare or quoted by the caller's JSON mode
        return {"brokerAddrs": dict(self.broker_addrs), "brokerName": self.broker_name, "cluster": self.cluster}


@dataclass
class BrokerLiveInfo:
    last_update_s: float
    data_version: DataVersion
    channel: object
    ha_server_addr: str | None


@dataclass
class RegisterBrokerResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


class RouteInfoManager:
    def __init__(self, *, broker_expiry_s: float = BROKER_CHANNEL_EXPIRED_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.broker_expiry_s = broker_expiry_s
        self.clock = clock
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # ------------------------------------------------------------------------------- registration
    def register_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int,
                        ha_server_addr: str | None, data_version: DataVersion,
                        topic_configs: Mapping[str, TopicConfig] | None, filter_server_list: list[str] | None,
                        channel: object) -> RegisterBrokerResult:
        """``RouteInfoManager.registerBroker``: queue data is (re)built from a master's topic configs
        when its DataVersion changed or the broker is new; topics the body leaves out are kept (an
        incremental registration after a topic update carries only that topic)."""
        result = RegisterBrokerResult()
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        register_first = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            register_first = True
            broker_data = self.broker_addr_table[broker_name] = BrokerData(cluster_name, broker_name)
        # switch slave to master: the same address keeps only one id
        for bid in [b for b, a in broker_data.broker_addrs.items() if a == broker_addr and b != broker_id]:
            del broker_data.broker_addrs[bid]
        old_addr = broker_data.broker_addrs.get(broker_id)
        broker_data.broker_addrs[broker_id] = broker_addr
        if broker_id == MASTER_ID and old_addr != broker_addr:
            log.info("cluster [%s] brokerName [%s] master address change from %s to %s",
                     broker_data.cluster, broker_name, old_addr, broker_addr)
        register_first = register_first or old_addr is None

        if topic_configs is not None and broker_id == MASTER_ID:
            if self.is_broker_topic_config_changed(broker_addr, data_version) or register_first:
                for config in topic_configs.values():
                    self._create_and_update_queue_data(broker_name, config)

        previous = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(self.clock(), data_version, channel, ha_server_addr)
        if previous is None:
            log.info("new broker registered, %s HAServer: %s", broker_addr, ha_server_addr)

        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[broker_addr] = list(filter_server_list)
            else:
                self.filter_server_table.pop(broker_addr, None)

        if broker_id != MASTER_ID:
            master_addr = broker_data.broker_addrs.get(MASTER_ID)
            if master_addr is not None:
                master_live = self.broker_live_table.get(master_addr)
                if master_live is not None:
                    result.ha_server_addr = master_live.ha_server_addr
                    result.master_addr = master_addr
        return result

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        prev = self.query_broker_topic_config(broker_addr)
        return prev is None or prev != data_version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return live.data_version if live is not None else None

    def update_broker_info_update_timestamp(self, broker_addr: str) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update_s = self.clock()

    def _create_and_update_queue_data(self, broker_name: str, config: TopicConfig) -> None:
        queue_data = QueueData(broker_name, config.read_queue_nums, config.write_queue_nums, config.perm,
                               config.topic_sys_flag)
        by_broker = self.topic_queue_table.get(config.topic_name)
        if by_broker is None:
            self.topic_queue_table[config.topic_name] = {broker_name: queue_data}
            log.info("new topic registered, %s %s", config.topic_name, queue_data)
            return
        old = by_broker.get(broker_name)
        by_broker[broker_name] = queue_data
        if old is not None and old != queue_data:
            log.info("topic changed, %s OLD: %s NEW: %s", config.topic_name, old, queue_data)

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        """``RouteInfoManager.unregisterBroker``."""
        live = self.broker_live_table.pop(broker_addr, None)
        log.info("unregisterBroker, remove from brokerLiveTable %s, %s", "OK" if live else "Failed", broker_addr)
        self.filter_server_table.pop(broker_addr, None)
        remove_broker_name = False
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is not None:
            broker_data.broker_addrs.pop(broker_id, None)
            if not broker_data.broker_addrs:
                del self.broker_addr_table[broker_name]
                remove_broker_name = True
        if remove_broker_name:
            names = self.cluster_addr_table.get(cluster_name)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster_name]
            self._remove_topic_by_broker_name(broker_name)

    def _remove_topic_by_broker_name(self, broker_name: str) -> None:
        for topic in list(self.topic_queue_table):
            by_broker = self.topic_queue_table[topic]
            if by_broker.pop(broker_name, None) is not None:
                log.info("removeTopicByBrokerName, remove one broker's topic %s %s", topic, broker_name)
            if not by_broker:
                del self.topic_queue_table[topic]

    # ------------------------------------------------------------------------------- liveness
    def scan_not_active_broker(self) -> list[str]:
        """``RouteInfoManager.scanNotActiveBroker``: drop brokers silent for ``broker_expiry_s``;
        returns their addresses (their connections are closed too)."""
        now = self.clock()
        expired = [(addr, live) for addr, live in self.broker_live_table.items()
                   if live.last_update_s + self.broker_expiry_s < now]
        for addr, live in expired:
            log.warning("The broker channel expired, %s %.0f s", addr, self.broker_expiry_s)
            close = getattr(live.channel, "close", None)
            if callable(close):
                close("broker registration expired")
            self.broker_live_table.pop(addr, None)
            self.on_channel_destroy(addr, live.channel)
        return [addr for addr, _ in expired]

    def on_channel_destroy(self, remote_addr: str | None, channel: object) -> None:
        """``RouteInfoManager.onChannelDestroy``: forget the broker that registered over ``channel``."""
        broker_addr = None
        if channel is not None:
            broker_addr = next((a for a, live in self.broker_live_table.items() if live.channel is channel), None)
        if broker_addr is None:
            broker_addr = remote_addr
        if not broker_addr:
            return
        self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        removed_names = []
        for name in list(self.broker_addr_table):
            data = self.broker_addr_table[name]
            for bid in [b for b, a in data.broker_addrs.items() if a == broker_addr]:
                del data.broker_addrs[bid]
                log.info("remove brokerAddr[%s, %s] from brokerAddrTable, because channel destroyed", bid, broker_addr)
            if not data.broker_addrs:
                del self.broker_addr_table[name]
                removed_names.append(name)
        for name in removed_names:
            for cluster in list(self.cluster_addr_table):
                names = self.cluster_addr_table[cluster]
                if name in names:
                    names.discard(name)
                    if not names:
                        del self.cluster_addr_table[cluster]
            self._remove_topic_by_broker_name(name)

    # ------------------------------------------------------------------------------- queries
    def pickup_topic_route_data(self, topic: str) -> dict | None:
        """``RouteInfoManager.pickupTopicRouteData`` as a ``TopicRouteData`` JSON object, or None when
        no broker hosts the topic."""
        by_broker = self.topic_queue_table.get(topic)
        if not by_broker:
            return None
        broker_datas, filter_servers = [], {}
        for name in sorted(by_broker):
            data = self.broker_addr_table.get(name)
            if data is None:
                continue
            broker_datas.append(data.to_json())
            if self.filter_server_table:
                for addr in data.broker_addrs.values():
                    servers = self.filter_server_table.get(addr)
                    if servers is not None:
                        filter_servers[addr] = list(servers)
        if not broker_datas:
            return None
        return {"brokerDatas": broker_datas, "filterServerTable": filter_servers,
                "queueDatas": [by_broker[n].to_json() for n in sorted(by_broker)]}

    def get_all_cluster_info(self) -> dict:
        """``ClusterInfo``: brokerAddrTable and clusterAddrTable."""
        return {"brokerAddrTable": {n: d.to_json() for n, d in self.broker_addr_table.items()},
                "clusterAddrTable": {c: sorted(names) for c, names in self.cluster_addr_table.items()}}

    def get_all_topic_list(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def get_topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(t for t, by_broker in self.topic_queue_table.items() if any(n in names for n in by_broker))

    def get_system_topic_list(self) -> tuple[list[str], str | None]:
        """``getSystemTopicList``: cluster and broker names, plus one broker address."""
        topics = set()
        for cluster, names in self.cluster_addr_table.items():
            topics.add(cluster)
            topics.update(names)
        addr = next((next(iter(d.broker_addrs.values())) for d in self.broker_addr_table.values()
                     if d.broker_addrs), None)
        return sorted(topics), addr

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        """``deleteTopic``: the whole topic, or only its queues on the brokers of ``cluster_name``."""
        if not cluster_name:
            self.topic_queue_table.pop(topic, None)
            return
        by_broker = self.topic_queue_table.get(topic)
        if by_broker is None:
            return
        for name in self.cluster_addr_table.get(cluster_name, ()):
            by_broker.pop(name, None)
        if not by_broker:
            del self.topic_queue_table[topic]

    def operate_write_perm_of_broker(self, broker_name: str, *, add: bool) -> int:
        """``wipeWritePermOfBrokerByLock`` / ``addWritePermOfBrokerByLock``: topics touched."""
        count = 0
        for by_broker in self.topic_queue_table.values():
            qd = by_broker.get(broker_name)
            if qd is None:
                continue
            perm = (PERM_READ | PERM_WRITE) if add else (qd.perm & ~PERM_WRITE)
            by_broker[broker_name] = QueueData(qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, perm,
                                               qd.topic_sys_flag)
            count += 1
        return count
