"""A store the broker wrote is a normal store for the Spark source (issue 11, "Done when"): the rows
Spark reads from it are the messages the producer sent, with the broker's fields (born host, CLUSTER).

(Here rather than in tests/broker, which runs first: there it was the session's first Spark test and waited
for the Spark session's start; here the session is up.)"""

from __future__ import annotations

import asyncio

import pytest

from rocketstream.store import MessageStore
from tests.broker.brokerutil import broker, client, send_v2

pytestmark = pytest.mark.spark


def test_spark_reads_what_was_sent_through_the_broker(spark, tmp_path):
    async def go():
        async with broker(tmp_path) as b:
            ch = await client(b)
            for i in range(30):
                r = await ch.invoke(send_v2("SparkT", f"s{i}".encode(), tags="TagS" if i % 3 else "TagX",
                                            keys=f"k{i}", queue_id=i % 3))
                assert r.code == 0, r.remark
            await ch.aclose()
            return b.store.root
    root = asyncio.run(go())
    with MessageStore.open(root, read_only=True) as store:
        assert store.check().ok
    df = spark.read.format("rocketmq").option("path", str(root)).option("topic", "SparkT").load()
    rows = sorted(df.select("queueId", "queueOffset", "body", "tags", "keys", "properties", "bornHost")
                  .collect(), key=lambda r: (r.queueId, r.queueOffset))
    expected = sorted((i % 3, i // 3, f"s{i}".encode(), "TagS" if i % 3 else "TagX", f"k{i}") for i in range(30))
    assert [(r.queueId, r.queueOffset, bytes(r.body), r.tags, r.keys) for r in rows] == expected
    assert all(r.properties["CLUSTER"] == "DefaultCluster" and r.bornHost.startswith("127.0.0.1:") for r in rows)
    tagged = spark.read.format("rocketmq").option("path", str(root)).option("topic", "SparkT") \
        .option("subExpression", "TagX").load()
    assert tagged.count() == 10
