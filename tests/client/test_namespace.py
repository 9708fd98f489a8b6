"""Namespaces without a broker: the rules of client/namespace.py (NamespaceUtil 4.9.8; the differential test
against the Java class itself is in test_namespace_java.py), and what the clients do with ``namespace=``:
the names they put on the wire and the names they hand back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstream.client.allocate import MessageQueue
from rocketstream.client.common import MessageExt
from rocketstream.client.config import ClientConfig, LitePullConsumerConfig, PushConsumerConfig
from rocketstream.client.consume_service import reset_retry_topic
from rocketstream.client.lite_pull import LitePullConsumer
from rocketstream.client.namespace import check_namespace, is_system_resource, unwrap, wrap
from rocketstream.client.producer import Producer
from rocketstream.client.push_consumer import PushConsumer
from rocketstream.client.transaction import TransactionProducer
from rocketstream.codec import HostAddress
from rocketstream.errors import OptionError

NS = "127.0.0.1:1"
HOST = HostAddress("127.0.0.1", 1)


def ext(topic: str, props: dict[str, str] | None = None) -> MessageExt:
    return MessageExt(topic, b"x", props or {}, 0, 0, 0, 0, 0, 0, HOST, 0, HOST, 0, 0, 0, 0)

# (namespace, resource, wrapNamespace, withoutNamespace(resource, namespace)); the values are what the 4.9.8
# NamespaceUtil answers (test_namespace_java.py asks it the same)
CASES = [
    ("ns1", "T", "ns1%T", "T"),
    ("ns1", "ns1%T", "ns1%T", "T"),
    ("ns1", "ns2%T", "ns1%ns2%T", "ns2%T"),
    ("ns1", "%RETRY%G", "%RETRY%ns1%G", "%RETRY%G"),
    ("ns1", "%RETRY%ns1%G", "%RETRY%ns1%G", "%RETRY%G"),
    ("ns1", "%DLQ%G", "%DLQ%ns1%G", "%DLQ%G"),
    ("ns1", "%DLQ%ns1%G", "%DLQ%ns1%G", "%DLQ%G"),
    ("ns1", "%RETRY%ns2%G", "%RETRY%ns1%ns2%G", "%RETRY%ns2%G"),
    # system topics (TopicValidator.SYSTEM_TOPIC_SET, exact) and the rmq_sys_ / CID_RMQ_SYS_ prefixes
    ("ns1", "TBW102", "TBW102", "TBW102"),
    ("ns1", "SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX"),
    ("ns1", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC"),
    ("ns1", "rmq_sys_anything", "rmq_sys_anything", "rmq_sys_anything"),
    ("ns1", "CID_RMQ_SYS_x", "CID_RMQ_SYS_x", "CID_RMQ_SYS_x"),
    # not system in 4.9.8: only exact names are (the old rules of this module had prefixes and more groups)
    ("ns1", "TBW102x", "ns1%TBW102x", "TBW102x"),
    ("ns1", "RMQ_SYS_OTHER", "ns1%RMQ_SYS_OTHER", "RMQ_SYS_OTHER"),
    ("ns1", "DEFAULT_CONSUMER", "ns1%DEFAULT_CONSUMER", "DEFAULT_CONSUMER"),
    ("ns1", "TOOLS_CONSUMER", "ns1%TOOLS_CONSUMER", "TOOLS_CONSUMER"),
    ("ns1", "CID_ONSAPI_OWNER", "ns1%CID_ONSAPI_OWNER", "CID_ONSAPI_OWNER"),
    ("ns1", "%SYS%x", "ns1%%SYS%x", "%SYS%x"),
    # a namespace that makes its own resources look like system ones: wrapped, never unwrapped
    ("rmq_sys_a", "T", "rmq_sys_a%T", "T"),
    ("rmq_sys_a", "rmq_sys_a%T", "rmq_sys_a%T", "rmq_sys_a%T"),
    ("", "T", "T", "T"),
    ("ns1", "", "", ""),
]


@pytest.mark.parametrize(("ns", "resource", "wrapped", "unwrapped"), CASES)
def test_wrap_and_unwrap_as_namespace_util(ns: str, resource: str, wrapped: str, unwrapped: str) -> None:
    assert wrap(ns, resource) == wrapped
    assert unwrap(ns, resource) == unwrapped


def test_no_namespace_changes_nothing() -> None:
    for ns in (None, ""):
        assert wrap(ns, "T") == "T" and unwrap(ns, "ns1%T") == "ns1%T"


def test_system_resources() -> None:
    assert is_system_resource("OFFSET_MOVED_EVENT") and is_system_resource("rmq_sys_x")
    assert not is_system_resource("") and not is_system_resource("%RETRY%CID_RMQ_SYS_x")
    assert wrap("ns1", "%RETRY%CID_RMQ_SYS_x") == "%RETRY%ns1%CID_RMQ_SYS_x"   # as Java: the whole name is checked


names = st.text(st.sampled_from("abAB01_-|%"), min_size=1, max_size=8)
namespaces = st.text(st.sampled_from("abAB01_-|"), min_size=1, max_size=6)


@given(namespaces, names)
def test_wrap_is_idempotent_and_unwrap_takes_it_back(ns: str, resource: str) -> None:
    once = wrap(ns, resource)
    assert wrap(ns, once) == once
    if once != resource:   # (a resource already in the namespace, or a system one, is left alone)
        assert unwrap(ns, once) == resource
        assert unwrap(ns + "x", once) == once   # another namespace's resource is not touched


@pytest.mark.parametrize("bad", ["a%b", " ns", "ns ", "  ", 5])
def test_check_namespace_refuses_bad_names(bad: object) -> None:
    with pytest.raises(OptionError) as err:
        check_namespace(bad)   # type: ignore[arg-type]
    assert err.value.option == "namespace"


def test_client_config_takes_a_namespace() -> None:
    assert ClientConfig(namesrv=NS, namespace="ns1").namespace == "ns1"
    assert ClientConfig(namesrv=NS, namespace="").namespace is None
    with pytest.raises(OptionError, match="namespace"):
        PushConsumerConfig(namesrv=NS, namespace="a%b")


def test_push_consumer_names_on_the_wire() -> None:
    c = PushConsumer("G", namesrv=NS, namespace="ns1")
    c.subscribe("T", "TagA")
    c.subscribe("rmq_sys_x")
    assert c.group == "ns1%G"
    data = c.consumer_data()
    assert data["groupName"] == "ns1%G"
    assert sorted(s["topic"] for s in data["subscriptionDataSet"]) == ["ns1%T", "rmq_sys_x"]
    c.unsubscribe("T")
    assert c.subscribed_topics() == {"rmq_sys_x"}
    plain = PushConsumer("G", namesrv=NS)
    plain.subscribe("T")
    assert plain.group == "G" and plain.subscribed_topics() == {"T"}


def test_push_consumer_send_back_puts_the_topic_back_in_the_namespace() -> None:
    c = PushConsumer("G", namesrv=NS, namespace="ns1")
    m = ext("T")
    assert c.send_message_back(m, 1, None) is False   # not started: nothing sent, the topic is the broker's
    assert m.topic == "ns1%T"


def test_delivered_messages_show_topics_without_the_namespace() -> None:
    plain = ext("ns1%T")
    retried = ext("%RETRY%ns1%G", {"RETRY_TOPIC": "ns1%T"})
    other = ext("ns2%T")
    reset_retry_topic([plain, retried, other], "ns1%G", "ns1")
    assert [m.topic for m in (plain, retried, other)] == ["T", "T", "ns2%T"]
    kept = ext("ns1%T")
    reset_retry_topic([kept], "ns1%G")
    assert kept.topic == "ns1%T"


def test_lite_pull_consumer_wraps_in_and_unwraps_out() -> None:
    c = LitePullConsumer("G", LitePullConsumerConfig(namesrv=NS, namespace="ns1"))
    assert c.group == "ns1%G"
    c.assign([MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)])
    assert c.subscribed_topics() == {"ns1%T"}
    assert c._assign_queues == {MessageQueue("ns1%T", "b", 0), MessageQueue("ns1%T", "b", 1)}
    c._assigned[MessageQueue("ns1%T", "b", 0)] = None   # type: ignore[assignment]
    assert c.assignment() == {MessageQueue("T", "b", 0)}
    c.pause([MessageQueue("T", "b", 0)])
    assert c._paused == {MessageQueue("ns1%T", "b", 0)}
    sub = LitePullConsumer("G", namesrv=NS, namespace="ns1")
    sub.subscribe("T")
    assert sub.consumer_data()["subscriptionDataSet"][0]["topic"] == "ns1%T"


def test_producer_group_in_the_namespace() -> None:
    p = Producer("PG", namesrv=NS, namespace="ns1")
    assert p.group == "ns1%PG" and p.namespace == "ns1"
    assert Producer("PG", namesrv=NS).group == "PG"
    q = p._wrap_queue(MessageQueue("T", "b", 1))
    assert q == MessageQueue("ns1%T", "b", 1) and p._unwrap_queue(q) == MessageQueue("T", "b", 1)
    with pytest.raises(OptionError, match="namespace"):
        Producer("PG", namesrv=NS, namespace="x%y")
    listener = type("L", (), {"execute_local_transaction": lambda *a: None,
                              "check_local_transaction": lambda *a: None})()
    assert TransactionProducer("PG", namesrv=NS, transaction_listener=listener, namespace="ns1").group == "ns1%PG"


def test_lite_pull_listeners_see_plain_topics_and_queues() -> None:
    c = LitePullConsumer("G", namesrv=NS, namespace="ns1")
    told: list[tuple] = []
    c.register_topic_message_queue_change_listener("T", lambda t, qs: told.append((t, qs)))
    c.subscribe("U", message_queue_listener=lambda t, a, d: told.append((t, a, d)))
    wrapped = MessageQueue("ns1%T", "b", 0)
    c.queue_watcher.listeners["ns1%T"]("ns1%T", {wrapped})
    c.message_queue_listeners["ns1%U"]("ns1%U", {MessageQueue("ns1%U", "b", 0)}, set())
    assert told == [("T", {MessageQueue("T", "b", 0)}), ("U", {MessageQueue("U", "b", 0)}, set())]
    with pytest.raises(OptionError, match="'mq'"):
        c.pause(["T"])   # type: ignore[list-item]


def test_transaction_check_back_shows_the_plain_topic() -> None:
    """``ClientRemotingProcessor.checkTransactionState``: the checked message arrives in the namespace, the
    listener sees its topic without it (the broker round trip: test_namespace_java.py)."""
    from rocketstream.client.transaction import LocalTransactionState
    from rocketstream.client.transaction_check import CheckTransactionStateHeader

    seen: list[str] = []
    listener = type("L", (), {"execute_local_transaction": lambda self, m, a: None,
                              "check_local_transaction": lambda self, m: seen.append(m.topic)
                              or LocalTransactionState.COMMIT_MESSAGE})()
    p = TransactionProducer("PG", namesrv=NS, transaction_listener=listener, namespace="ns1")
    header = CheckTransactionStateHeader(0, 0, None, None, None)
    p._check("127.0.0.1:1", ext("ns1%T", {"PGROUP": "ns1%PG"}), header)   # not started: the answer is not sent
    p._check("127.0.0.1:1", ext("ns2%T"), header)
    assert seen == ["T", "ns2%T"]
