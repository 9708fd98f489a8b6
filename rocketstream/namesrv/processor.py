"""``DefaultRequestProcessor`` of the name server: registration, routes, cluster info, topic lists,
KV config. Bodies are written as the Java name server writes them (fastjson: ``RemotingSerializable.encode``,
``getRouteInfoByTopic``'s standard-JSON form; docs/remoting-protocol.md)."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping

from rocketstream.codec import INT32, names
from rocketstream.errors import BodyError
from rocketstream.namesrv.kv_config import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from rocketstream.namesrv.route_info import DataVersion, RouteInfoManager, TopicConfig
from rocketstream.remoting import json_body as _json
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.codes import RequestCode, ResponseCode, Version
from rocketstream.remoting.command import RemotingCommand

__all__ = ["DefaultRequestProcessor", "decode_register_broker_body", "crc32_rocketmq"]

log = logging.getLogger("rocketstream.namesrv")

MAX_INFLATED_BODY = 64 * 1024 * 1024   # a compressed registration never inflates past this
FAQ_SUGGEST = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."   # FAQUrl.suggestTodo(APPLY_TOPIC_URL)


def crc32_rocketmq(data: bytes) -> int:
    """``UtilAll.crc32``: CRC32 masked to a non-negative int."""
    return zlib.crc32(data) & 0x7FFFFFFF


# ------------------------------------------------------------------------------------ bodies
def _int(doc: Mapping, key: str, default: int, what: str) -> int:
    v = doc.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise BodyError(f"{what}: {key} is not an integer: {v!r:.60}")
    try:
        return int(v)
    except ValueError:
        raise BodyError(f"{what}: {key} is not an integer: {v!r:.60}") from None


def _data_version(doc: object, what: str) -> DataVersion:
    if doc is None:
        return DataVersion()
    if not isinstance(doc, Mapping):
        raise BodyError(f"{what}: dataVersion is not an object")
    return DataVersion(timestamp=_int(doc, "timestamp", 0, what), counter=_int(doc, "counter", 0, what))


def _topic_config(name: object, doc: object, what: str) -> TopicConfig:
    if not isinstance(doc, Mapping):
        raise BodyError(f"{what}: topic config of {name!r:.60} is not an object")
    topic = doc.get("topicName", name)
    if not isinstance(topic, str):
        raise BodyError(f"{what}: topicName is not a string: {topic!r:.60}")
    w = f"{what} topic {topic}"
    return TopicConfig(topic, _int(doc, "readQueueNums", 16, w), _int(doc, "writeQueueNums", 16, w),
                       _int(doc, "perm", 6, w), _int(doc, "topicSysFlag", 0, w))


def _wrapper(doc: object, what: str) -> tuple[DataVersion, dict[str, TopicConfig]]:
    """``TopicConfigSerializeWrapper``: dataVersion + topicConfigTable."""
    if doc is None:
        return DataVersion(), {}
    if not isinstance(doc, Mapping):
        raise BodyError(f"{what}: topicConfigSerializeWrapper is not an object")
    table = doc.get("topicConfigTable")
    table = {} if table is None else table
    if not isinstance(table, Mapping):
        raise BodyError(f"{what}: topicConfigTable is not an object")
    configs = {}
    for name, config in table.items():
        tc = _topic_config(name, config, what)
        configs[tc.topic_name] = tc
    return _data_version(doc.get("dataVersion"), what), configs


def _routable(configs: dict[str, TopicConfig], broker_name: str, cluster_name: str,
              broker_addr: str) -> dict[str, TopicConfig]:
    """The registered topics that get routes: legal topic names (codec/names.py: a broker that kept an
    illegal one, e.g. from before it checked names, does not make it routable), and the topics named
    after the broker and its cluster whatever their names (a Java broker creates those at start)."""
    own = {broker_name, cluster_name, f"{cluster_name}_REPLY_TOPIC"}
    bad = [name for name in configs if name not in own and names.registered_topic_problem(name) is not None]
    if not bad:
        return configs
    log.warning("registerBroker from %s: %d topic(s) with illegal names get no route, e.g. %s: %s", broker_addr,
                len(bad), names.quote_name(bad[0]), names.registered_topic_problem(bad[0]))
    refused = set(bad)
    return {name: tc for name, tc in configs.items() if name not in refused}


def decode_register_broker_body(body: bytes, compressed: bool, *, with_filter_server: bool = True
                                ) -> tuple[DataVersion, dict[str, TopicConfig], list[str]]:
    """``RegisterBrokerBody.decode``: JSON, or (``compressed``) a zlib stream of length-prefixed parts:
    DataVersion JSON, topic count, per topic ``TopicConfig.encode()`` (``name read write perm filterType``),
    filter-server list JSON. A pre-3.0.11 body is a bare TopicConfigSerializeWrapper."""
    what = "RegisterBrokerBody"
    if not compressed:
        doc = _json.loads(body, what=what)
        if not with_filter_server:
            dv, configs = _wrapper(doc, what)
            return dv, configs, []
        if not isinstance(doc, Mapping):
            raise BodyError(f"{what} is not a JSON object")
        dv, configs = _wrapper(doc.get("topicConfigSerializeWrapper"), what)
        servers = doc.get("filterServerList")
        servers = [] if servers is None else servers
        if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
            raise BodyError(f"{what}: filterServerList is not a list of strings")
        return dv, configs, list(servers)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(body, MAX_INFLATED_BODY)
    except zlib.error as exc:
        raise BodyError(f"compressed {what} does not inflate: {exc}") from exc
    if inflater.unconsumed_tail:
        raise BodyError(f"compressed {what} inflates past {MAX_INFLATED_BODY} bytes")
    pos = 0

    def part() -> bytes:
        nonlocal pos
        if len(raw) - pos < 4:
            raise BodyError(f"compressed {what} truncated at byte {pos}")
        (n,) = INT32.unpack_from(raw, pos)
        pos += 4
        if n < 0 or n > len(raw) - pos:
            raise BodyError(f"compressed {what}: length {n} at byte {pos - 4} exceeds the body")
        chunk = raw[pos:pos + n]
        pos += n
        return chunk

    dv = _data_version(_json.loads(part(), what=f"{what} dataVersion"), what)
    if len(raw) - pos < 4:
        raise BodyError(f"compressed {what} truncated at byte {pos}")
    (count,) = INT32.unpack_from(raw, pos)
    pos += 4
    if count < 0:
        raise BodyError(f"compressed {what}: negative topic count {count}")
    configs = {}
    for _ in range(count):
        text = part().decode("utf-8", "replace")
        fields = text.split(" ")   # TopicConfig.decode: exactly 5 fields, else the config stays default
        if len(fields) == 5:
            try:
                tc = TopicConfig(fields[0], int(fields[1]), int(fields[2]), int(fields[3]))
            except ValueError:
                raise BodyError(f"compressed {what}: bad topic config {text[:80]!r}") from None
            configs[tc.topic_name] = tc
    servers = _json.loads(part(), what=f"{what} filterServerList") if pos < len(raw) else []
    if not isinstance(servers, list):
        raise BodyError(f"compressed {what}: filterServerList is not a list")
    return dv, configs, [str(s) for s in servers]


# ------------------------------------------------------------------------------------ processor
class DefaultRequestProcessor:
    """Dispatches by request code; codes the Java name server does not serve get REQUEST_CODE_NOT_SUPPORTED
    (where the Java name server would not answer at all: its ``processRequest`` switch returns null;
    docs/remoting-protocol.md)."""

    def __init__(self, routes: RouteInfoManager, kv: KVConfigManager, *, order_message_enable: bool = False) -> None:
        self.routes = routes
        self.kv = kv
        self.order_message_enable = order_message_enable
        self.handlers = {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.QUERY_DATA_VERSION: self.query_broker_topic_config,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm_of_broker,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm_of_broker,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic_in_namesrv,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kvlist_by_namespace,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list,
        }

    # --- KV config (KVConfigManager)
    def put_kv_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        self.kv.put_kv_config(req.field("namespace"), req.field("key"), req.field("value"))
        return req.response(ResponseCode.SUCCESS)

    def get_kv_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        ns, key = req.field("namespace"), req.field("key")
        value = self.kv.get_kv_config(ns, key)
        if value is not None:
            return req.response(ResponseCode.SUCCESS, fields={"value": value})
        return req.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")

    def delete_kv_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        self.kv.delete_kv_config(req.field("namespace"), req.field("key"))
        return req.response(ResponseCode.SUCCESS)

    def get_kvlist_by_namespace(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        ns = req.field("namespace")
        body = self.kv.get_kv_list_by_namespace(ns)
        if body is not None:
            return req.response(ResponseCode.SUCCESS, body=body)
        return req.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")

    # --- brokers
    def query_broker_topic_config(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """QUERY_DATA_VERSION: ``changed`` tells a broker (forceRegister=false) to register again."""
        broker_addr = req.field("brokerAddr")
        for name in ("brokerName", "clusterName", "brokerId"):
            req.field(name)
        dv = _data_version(_json.loads(req.body or b"{}", what="DataVersion body"), "DataVersion body")
        changed = self.routes.is_broker_topic_config_changed(broker_addr, dv)
        if not changed:
            self.routes.update_broker_info_update_timestamp(broker_addr)
        stored = self.routes.query_broker_topic_config(broker_addr)
        return req.response(ResponseCode.SUCCESS, fields={"changed": changed},
                            body=_json.dumps(stored.to_json()) if stored is not None else None)

    def register_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """``registerBrokerWithFilterServer`` (peer version >= V3_0_11) / ``registerBroker``."""
        broker_name, broker_addr = req.field("brokerName"), req.field("brokerAddr")
        cluster_name, ha_server_addr = req.field("clusterName"), req.field("haServerAddr")
        broker_id = req.int_field("brokerId")
        compressed = req.bool_field("compressed", default=False)
        body_crc = req.int_field("bodyCrc32", required=False, default=0)
        if body_crc != 0 and crc32_rocketmq(req.body or b"") != body_crc:
            log.warning("receive registerBroker request, crc32 not match, from %s", channel.addr)
            return req.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if req.body is not None:
            dv, configs, servers = decode_register_broker_body(
                req.body, compressed, with_filter_server=req.version >= Version.V3_0_11)
        else:
            dv, configs, servers = DataVersion(0, 0), {}, []
        configs = _routable(configs, broker_name, cluster_name, broker_addr)
        result = self.routes.register_broker(cluster_name, broker_addr, broker_name, broker_id, ha_server_addr,
                                             dv, configs, servers, channel)
        return req.response(ResponseCode.SUCCESS,
                            fields={"haServerAddr": result.ha_server_addr, "masterAddr": result.master_addr},
                            body=self.kv.get_kv_list_by_namespace(NAMESPACE_ORDER_TOPIC_CONFIG))

    def unregister_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        self.routes.unregister_broker(req.field("clusterName"), req.field("brokerAddr"), req.field("brokerName"),
                                      req.int_field("brokerId"))
        return req.response(ResponseCode.SUCCESS)

    def wipe_write_perm_of_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        count = self.routes.operate_write_perm_of_broker(req.field("brokerName"), add=False)
        return req.response(ResponseCode.SUCCESS, fields={"wipeTopicCount": count})

    def add_write_perm_of_broker(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        count = self.routes.operate_write_perm_of_broker(req.field("brokerName"), add=True)
        return req.response(ResponseCode.SUCCESS, fields={"addTopicCount": count})

    # --- routes and lists
    def get_route_info_by_topic(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        """Standard JSON (quoted broker-id keys) for peers of version >= V4_9_4 or asking with
        ``acceptStandardJsonOnly``; fastjson's bare keys otherwise (``getRouteInfoByTopic``)."""
        topic = req.field("topic")
        route = self.routes.pickup_topic_route_data(topic)
        if route is None:
            return req.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"No topic route info in name server for the topic: {topic}{FAQ_SUGGEST}")
        if self.order_message_enable:
            route["orderTopicConf"] = self.kv.get_kv_config(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        standard = req.version >= Version.V4_9_4 or bool(req.bool_field("acceptStandardJsonOnly", default=False))
        return req.response(ResponseCode.SUCCESS, body=_json.dumps(route, standard=standard))

    def get_broker_cluster_info(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=_json.dumps(self.routes.get_all_cluster_info()))

    def get_all_topic_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        return req.response(ResponseCode.SUCCESS, body=_json.dumps({"topicList": self.routes.get_all_topic_list()}))

    def delete_topic_in_namesrv(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        self.routes.delete_topic(req.field("topic"), req.field("clusterName", required=False))
        return req.response(ResponseCode.SUCCESS)

    def get_topics_by_cluster(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topics = self.routes.get_topics_by_cluster(req.field("cluster"))
        return req.response(ResponseCode.SUCCESS, body=_json.dumps({"topicList": topics}))

    def get_system_topic_list(self, channel: Channel, req: RemotingCommand) -> RemotingCommand:
        topics, addr = self.routes.get_system_topic_list()
        return req.response(ResponseCode.SUCCESS, body=_json.dumps({"brokerAddr": addr, "topicList": topics}))

    def __call__(self, channel: Channel, req: RemotingCommand) -> RemotingCommand | None:
        handler = self.handlers.get(req.code)
        if handler is None:
            return req.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")
        return handler(channel, req)
