"""Helpers shared by the consumer scenario tests (against ``mq_broker``: ours and the real 4.9.8)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from rocketstream.client.producer import Producer


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def produce(namesrv: str, topic: str, bodies: list[bytes], *, tags: list[str | None] | None = None,
            sharding: Callable[[int], str] | None = None) -> list[Any]:
    with Producer(unique("pg"), namesrv=namesrv) as p:
        out = []
        for i, body in enumerate(bodies):
            tag = tags[i % len(tags)] if tags else None
            if sharding is not None:
                out.append(p.send(topic, body, tags=tag, sharding_key=sharding(i)))
            else:
                out.append(p.send(topic, body, tags=tag))
        return out


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
