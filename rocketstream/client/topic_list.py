"""The name server's topic lists, as ``MQClientAPIImpl.getTopicListFromNameServer`` and
``getSystemTopicList`` ask for them (``mqadmin topicList`` shows the first).

GET_ALL_TOPIC_LIST_FROM_NAMESERVER answers a ``TopicList`` body, ``{"topicList": [names]}``: every topic of
the routes, including the cluster and broker names that brokers register as topics. GET_SYSTEM_TOPIC_LIST_FROM_NS
answers the same shape (plus ``brokerAddr``) with those cluster and broker names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rocketstream.errors import BodyError, BrokerResponseError
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode, code_name, json_body

if TYPE_CHECKING:
    from rocketstream.client.api import MQClientAPI


async def all_topics(api: MQClientAPI, timeout: float) -> list[str]:
    """Every topic the name server has a route for (GET_ALL_TOPIC_LIST_FROM_NAMESERVER)."""
    return await _topic_list(api, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, timeout)


async def system_topics(api: MQClientAPI, timeout: float) -> list[str]:
    """The cluster and broker names the name server lists as topics (GET_SYSTEM_TOPIC_LIST_FROM_NS)."""
    return await _topic_list(api, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, timeout)


async def _topic_list(api: MQClientAPI, code: int, timeout: float) -> list[str]:
    addr, resp = await api.invoke_namesrv(RemotingCommand.request(code, {}), timeout)
    if resp.code != ResponseCode.SUCCESS:
        raise BrokerResponseError(resp.code, resp.remark, addr=addr, request_code=code, what="topic list")
    what = f"{code_name(code)} body"
    doc = json_body.loads(resp.body or b"", what=what, addr=addr)
    listed = doc.get("topicList") if isinstance(doc, Mapping) else None
    if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
        raise BodyError(f'{what}: expected {{"topicList": [names]}}, got {doc!r:.200}', addr=addr)
    return listed


__all__ = ["all_topics", "system_topics"]
