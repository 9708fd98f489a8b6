"""Admin requests the tests and benchmarks send to a broker (ours or a 4.9.8 one) as mqadmin would."""

from __future__ import annotations

import asyncio

from rocketstream.remoting import RemotingCommand, RequestCode, connect


def create_topic(broker_addr: str, topic: str, queues: int, *, write: int | None = None, perm: int = 6,
                 timeout: float = 10.0) -> None:
    """UPDATE_AND_CREATE_TOPIC (``mqadmin updateTopic -b``) on one broker: ``queues`` read queues and ``write``
    write queues (default: as many). RuntimeError naming the broker, the topic and the answer when refused."""
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues,
              "writeQueueNums": queues if write is None else write, "perm": perm, "topicFilterType": "SINGLE_TAG",
              "topicSysFlag": 0, "order": False}

    async def go() -> RemotingCommand:
        ch = await connect(broker_addr)
        try:
            return await ch.invoke(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields), timeout)
        finally:
            await ch.aclose()

    resp = asyncio.run(go())
    if resp.code != 0:
        raise RuntimeError(f"creating topic {topic} on {broker_addr}: code {resp.code} {resp.remark}")
