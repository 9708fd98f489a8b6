"""PullMessageService: a request put back at once by its own pull is pulled again by the same task, in order
with the other requests; one put back from elsewhere, or later, gets a task of its own; errors retry later."""

from __future__ import annotations

import asyncio

import pytest

from rocketstream.client import pull_service
from rocketstream.client.allocate import MessageQueue
from rocketstream.client.process_queue import ProcessQueue
from rocketstream.client.pull_service import PullMessageService, PullRequest


def request(qid: int) -> PullRequest:
    return PullRequest("g", MessageQueue("T", "b", qid), ProcessQueue(), 0)


def test_a_request_put_back_by_its_own_pull_reuses_its_task() -> None:
    async def main() -> None:
        order: list[tuple[int, int]] = []
        tasks: dict[int, set[asyncio.Task]] = {0: set(), 1: set()}
        done = asyncio.Event()
        svc: PullMessageService

        async def pull(pr: PullRequest) -> None:
            qid = pr.message_queue.queue_id
            tasks[qid].add(asyncio.current_task())   # type: ignore[arg-type]
            order.append((qid, pr.next_offset))
            await asyncio.sleep(0)   # the broker's answer
            pr.next_offset += 1
            if pr.next_offset < 3:
                svc.execute_pull_request_immediately(pr)
            elif qid == 0:
                svc.execute_pull_request_later(pr, 0.001)   # a delay: a task of its own
            else:
                done.set()

        svc = PullMessageService(pull)
        svc.start()
        a, b = request(0), request(1)
        svc.execute_pull_request_immediately(a)
        svc.execute_pull_request_immediately(b)
        await asyncio.wait_for(done.wait(), 10)
        while a.next_offset < 4:
            await asyncio.sleep(0.001)
        await svc.stop()
        assert order[:6] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]   # the queues' pulls interleave
        assert order[6:] == [(0, 3)]
        assert len(tasks[1]) == 1 and len(tasks[0]) == 2
        assert not a.pulling and not b.pulling and not a.again

    asyncio.run(main())


def test_a_failed_pull_is_retried_later_not_again_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pull_service, "PULL_TIME_DELAY_WHEN_EXCEPTION_S", 0.01)

    async def main() -> None:
        calls: list[float] = []
        svc: PullMessageService

        async def pull(pr: PullRequest) -> None:
            calls.append(asyncio.get_running_loop().time())
            if len(calls) == 1:
                svc.execute_pull_request_immediately(pr)   # asked to pull again, then failed
                raise RuntimeError("decode bug")

        svc = PullMessageService(pull)
        svc.start()
        pr = request(0)
        svc.execute_pull_request_immediately(pr)
        while len(calls) < 2:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)
        await svc.stop()
        assert len(calls) == 2 and calls[1] - calls[0] >= 0.009   # once, after the exception delay
        assert not pr.again and not pr.pulling

    asyncio.run(main())
