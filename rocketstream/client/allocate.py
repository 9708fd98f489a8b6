"""Queue allocation strategies of the RocketMQ consumer client (spec section 8).

``allocate`` gives, for one consumer id of a group, the queues the Java client's strategy of the
same name gives it for the same inputs. Like Java, ``allocate`` uses ``mq_all`` and ``cid_all`` in
the order it receives them; RocketMQ's rebalance sorts them first (``sort_inputs``), and
``allocate_all`` does both for every consumer of the group at once.

Strategy names and their keyword arguments:

=========================  =================================================================
``AVG``                    (none) contiguous blocks, the first ``N % C`` consumers one larger
``AVG_BY_CIRCLE``          (none) round robin
``CONSISTENT_HASH``        ``virtual_node_cnt=10``, ``hash_function=None`` (``str -> int``;
                           default MD5, first 4 digest bytes, big-endian unsigned)
``CONFIG``                 ``message_queue_list`` returned as is; no checks, inputs ignored
``MACHINE_ROOM``           ``consumeridcs``: rooms whose queues (``room@broker``) this group reads
``MACHINE_ROOM_NEARBY``    ``inner`` (strategy name), ``machine_room_of_queue(mq) -> str``,
                           ``machine_room_of_cid(cid) -> str``; other kwargs go to ``inner``.
                           ``"MACHINE_ROOM_NEARBY-<inner>"`` (Java's ``getName()``) also works.
=========================  =================================================================
"""

from __future__ import annotations

import bisect
import hashlib
import inspect
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rocketstream.client._java import java_split, utf16_key
from rocketstream.errors import AllocationError

STRATEGIES = ("AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH", "CONFIG", "MACHINE_ROOM", "MACHINE_ROOM_NEARBY")
NEARBY_PREFIX = "MACHINE_ROOM_NEARBY-"


@dataclass(frozen=True)
class MessageQueue:
    """One queue of a topic on one broker; ordered like Java's ``MessageQueue.compareTo``.

    Java compares queue ids by their int difference, which overflows only for ids more than 2**31
    apart; RocketMQ queue ids are small and non-negative, so plain integer order is the same.
    """

    topic: str
    broker_name: str
    queue_id: int

    def sort_key(self) -> tuple[bytes, bytes, int]:
        return (utf16_key(self.topic), utf16_key(self.broker_name), self.queue_id)

    # Ordering by the Java key (dataclass(order=True) would compare by Python code point).
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        if self.topic == other.topic and self.broker_name == other.broker_name:
            return self.queue_id < other.queue_id   # the usual case, without encoding two strings twice
        return self.sort_key() < other.sort_key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self.sort_key() <= other.sort_key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self.sort_key() > other.sort_key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self.sort_key() >= other.sort_key()

    def __str__(self) -> str:
        # Exactly Java's toString(): consistent hashing hashes this text.
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"


def sort_inputs(
    mq_all: Iterable[MessageQueue], cid_all: Iterable[str]
) -> tuple[list[MessageQueue], list[str]]:
    """RebalanceImpl's preparation: queues de-duplicated (they come from a set) and sorted,
    client ids sorted by Java string order (duplicates kept, as Java keeps them)."""
    return sorted(set(mq_all)), sorted(cid_all, key=utf16_key)


def allocate(
    strategy: str,
    current_cid: str,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
    **strategy_args: Any,
) -> list[MessageQueue]:
    """The queues ``current_cid`` owns under ``strategy`` (inputs used in the order given)."""
    if strategy.startswith(NEARBY_PREFIX):
        strategy_args = {"inner": strategy[len(NEARBY_PREFIX):], **strategy_args}
        strategy = "MACHINE_ROOM_NEARBY"
    impl = _IMPLS.get(strategy)
    if impl is None:
        raise AllocationError(f"unknown allocation strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    return impl(current_cid, list(mq_all), list(cid_all), **strategy_args)


def allocate_all(
    strategy: str, mq_all: Iterable[MessageQueue], cid_all: Iterable[str], **strategy_args: Any
) -> dict[str, list[MessageQueue]]:
    """Sort the inputs as RocketMQ does, then allocate for every consumer id of the group."""
    mqs, cids = sort_inputs(mq_all, cid_all)
    return {cid: allocate(strategy, cid, mqs, cids, **strategy_args) for cid in dict.fromkeys(cids)}


def _check(current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]) -> bool:
    """Spec 8.3: bad input raises; a consumer the group does not list gets nothing."""
    if not current_cid:
        raise AllocationError("currentCID is empty")
    if not mq_all:
        raise AllocationError("mqAll is null or mqAll empty")
    if not cid_all:
        raise AllocationError("cidAll is null or cidAll empty")
    return current_cid in cid_all


def _avg(current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]) -> list[MessageQueue]:
    if not _check(current_cid, mq_all, cid_all):
        return []
    n, c, i = len(mq_all), len(cid_all), cid_all.index(current_cid)
    mod = n % c
    bigger = mod > 0 and i < mod
    size = 1 if n <= c else (n // c + 1 if bigger else n // c)
    start = i * size if bigger else i * size + mod
    count = min(size, n - start)
    return mq_all[start:start + count] if count > 0 else []


def _avg_by_circle(current_cid: str, mq_all: list[MessageQueue], cid_all: list[str]) -> list[MessageQueue]:
    if not _check(current_cid, mq_all, cid_all):
        return []
    i = cid_all.index(current_cid)
    return mq_all[i::len(cid_all)]


def md5_hash(key: str) -> int:
    """RocketMQ's default ring hash: first 4 MD5 digest bytes of the UTF-8 key, big-endian unsigned."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def _consistent_hash(
    current_cid: str,
    mq_all: list[MessageQueue],
    cid_all: list[str],
    *,
    virtual_node_cnt: int = 10,
    hash_function: Callable[[str], int] | None = None,
) -> list[MessageQueue]:
    if isinstance(virtual_node_cnt, bool) or not isinstance(virtual_node_cnt, int) or virtual_node_cnt < 0:
        raise AllocationError(f"illegal virtualNodeCnt :{virtual_node_cnt}")
    if not _check(current_cid, mq_all, cid_all):
        return []
    hash_of = hash_function or md5_hash
    ring: dict[int, str] = {}  # ring key -> client id owning that virtual node
    for cid in cid_all:
        # A repeated client id continues its replica numbering after the nodes it already has
        # on the ring (ConsistentHashRouter.getExistingReplicas); collisions overwrite.
        existing = sum(1 for owner in ring.values() if owner == cid)
        for r in range(existing, existing + virtual_node_cnt):
            ring[hash_of(f"{cid}-{r}")] = cid
    if not ring:
        return []
    keys = sorted(ring)
    result = []
    for mq in mq_all:
        pos = bisect.bisect_left(keys, hash_of(str(mq)))  # smallest ring key >= hash, else wrap
        if ring[keys[pos % len(keys)]] == current_cid:
            result.append(mq)
    return result


def _config(
    current_cid: str, mq_all: list[MessageQueue], cid_all: list[str], *, message_queue_list: Sequence[MessageQueue]
) -> list[MessageQueue]:
    return list(message_queue_list)


def _machine_room(
    current_cid: str, mq_all: list[MessageQueue], cid_all: list[str], *, consumeridcs: Collection[str]
) -> list[MessageQueue]:
    if not _check(current_cid, mq_all, cid_all):
        return []
    i, c = cid_all.index(current_cid), len(cid_all)
    pre = []
    for mq in mq_all:
        parts = java_split(mq.broker_name, "@")
        if len(parts) == 2 and parts[0] in consumeridcs:
            pre.append(mq)
    mod, rem = divmod(len(pre), c)
    result = pre[mod * i:mod * i + mod]
    if rem > i:
        result.append(pre[i + mod * c])
    return result


def _machine_room_nearby(
    current_cid: str,
    mq_all: list[MessageQueue],
    cid_all: list[str],
    *,
    inner: str,
    machine_room_of_queue: Callable[[MessageQueue], str | None],
    machine_room_of_cid: Callable[[str], str | None],
    **inner_args: Any,
) -> list[MessageQueue]:
    if inner.startswith("MACHINE_ROOM_NEARBY") or inner not in _IMPLS:
        raise AllocationError(f"MACHINE_ROOM_NEARBY: invalid inner strategy {inner!r}")
    if not _check(current_cid, mq_all, cid_all):
        return []
    queues_by_room: dict[str, list[MessageQueue]] = {}
    for mq in mq_all:
        room = machine_room_of_queue(mq)
        if not room:
            raise AllocationError(f"Machine room is null for mq {mq}")
        queues_by_room.setdefault(room, []).append(mq)
    cids_by_room: dict[str, list[str]] = {}
    for cid in cid_all:
        room = machine_room_of_cid(cid)
        if not room:
            raise AllocationError(f"Machine room is null for consumer id {cid}")
        cids_by_room.setdefault(room, []).append(cid)

    def run(mqs: list[MessageQueue], cids: list[str]) -> list[MessageQueue]:
        return allocate(inner, current_cid, mqs, cids, **inner_args)

    # (1) queues of my room shared among the consumers of my room
    my_room = machine_room_of_cid(current_cid)
    result: list[MessageQueue] = []
    if my_room is not None:   # no room is no key of either table: nothing of its own
        mine = queues_by_room.pop(my_room, None)
        if mine:
            result += run(mine, cids_by_room.get(my_room, []))
    # (2) rooms without any consumer: their queues shared among everybody, rooms in Java TreeMap order
    for room in sorted(queues_by_room, key=utf16_key):
        if room not in cids_by_room:
            result += run(queues_by_room[room], cid_all)
    return result


def _strict(fn: Callable[..., list[MessageQueue]], name: str) -> Callable[..., list[MessageQueue]]:
    """Reject missing or misspelt strategy arguments with AllocationError (not TypeError)."""
    signature = inspect.signature(fn)

    def wrapped(current_cid: str, mq_all: list[MessageQueue], cid_all: list[str], **kw: Any) -> list[MessageQueue]:
        try:
            signature.bind(current_cid, mq_all, cid_all, **kw)
        except TypeError as exc:
            raise AllocationError(f"{name}: bad strategy arguments {sorted(kw)}: {exc}") from exc
        return fn(current_cid, mq_all, cid_all, **kw)

    return wrapped


_IMPLS: dict[str, Callable[..., list[MessageQueue]]] = {
    "AVG": _strict(_avg, "AVG"),
    "AVG_BY_CIRCLE": _strict(_avg_by_circle, "AVG_BY_CIRCLE"),
    "CONSISTENT_HASH": _strict(_consistent_hash, "CONSISTENT_HASH"),
    "CONFIG": _strict(_config, "CONFIG"),
    "MACHINE_ROOM": _strict(_machine_room, "MACHINE_ROOM"),
    "MACHINE_ROOM_NEARBY": _strict(_machine_room_nearby, "MACHINE_ROOM_NEARBY"),
}
