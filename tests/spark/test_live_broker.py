"""Local mode over a store a live broker serves: consumerGroup offsets go through the broker or the query fails."""

from __future__ import annotations

import pytest

from rocketstream.client.offset_ranges import QueueKey
from rocketstream.errors import OptionError
from rocketstream.spark import positions
from rocketstream.spark.options import parse_options
from spark_stores import TOPIC, fill
from tests.broker.conftest import start_serve, stop_serve


def test_group_commit_goes_through_our_live_broker(tmp_path):
    store = tmp_path / "store"
    fill(store, 8)
    served = start_serve(tmp_path / "home", store=store)
    try:
        base = {"path": str(store), "topic": TOPIC, "consumerGroup": "g-live"}
        options = parse_options(base, streaming=True)
        brokers = positions.resolve_broker_names(options)
        with positions.open_views(brokers) as views:
            q = QueueKey(TOPIC, brokers[0].name, 0)
            with pytest.raises(OptionError, match="brokerAddr") as err:
                positions.commit_offsets(options, views, {q: 2})
            assert "lock" in str(err.value) and "nameServer" in str(err.value)
        options = parse_options({**base, "brokerAddr": f"127.0.0.1:{served.broker_port}"}, streaming=True)
        brokers = positions.resolve_broker_names(options)
        with positions.open_views(brokers) as views:
            positions.commit_offsets(options, views, {q: 2})
            assert positions.read_committed(options, views, [q]) == {q: 2}   # asked of the broker
    finally:
        stop_serve(served)
    from rocketstream.store.meta.offsets import ConsumerOffsetManager

    assert ConsumerOffsetManager(store, read_only=True).offsets_of("g-live", TOPIC) == {0: 2}  # persisted by it


def test_broker_addr_is_checked():
    with pytest.raises(OptionError, match="brokerAddr"):
        parse_options({"path": "/x", "topic": "T", "brokerAddr": "nohost"}, streaming=False)
    with pytest.raises(OptionError, match="brokerAddr"):
        parse_options({"brokers": "a=/x", "topic": "T", "brokerAddr": "h:1"}, streaming=False)
