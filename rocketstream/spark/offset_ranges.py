"""Spark planning maths: ranges per queue, splitting, task assignment, rate limits, offset JSON.

The counterpart of Spark's Kafka ``KafkaOffsetRangeCalculator`` plus the rate-limit maths of its
micro-batch stream, with no store and no Spark: every function takes offsets and returns offsets.

Offsets are *next* queue offsets (exclusive ends), as in the broker's consumerOffset.json.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rocketstream.client.allocate import MessageQueue, allocate_all
from rocketstream.errors import AllocationError, OptionError, RocketStreamError

# A queue is identified exactly like RocketMQ's MessageQueue (same fields, same order).
QueueKey = MessageQueue

EARLIEST = -2  # in user-written startingOffsets / endingOffsets
LATEST = -1
_INT64_MAX = (1 << 63) - 1
_QUEUE_ID = re.compile(r"(?:0|[1-9][0-9]*)\Z")


@dataclass(frozen=True)
class OffsetRange:
    """Queue offsets ``[start, end)`` of one queue."""

    queue: QueueKey
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def ranges_between(start: Mapping[QueueKey, int], end: Mapping[QueueKey, int]) -> list[OffsetRange]:
    """One range per queue of ``end`` (queue order), from ``start[q]``; every queue needs a start."""
    missing = [str(q) for q in end if q not in start]
    if missing:
        raise RocketStreamError(f"no start offset for {', '.join(missing)}")
    return [OffsetRange(q, start[q], end[q]) for q in sorted(end)]


def _check_range(r: OffsetRange) -> None:
    # end < start means the caller mixed up offsets (or a queue was reset): refuse, never guess.
    if r.start < 0 or r.end < r.start:
        raise RocketStreamError(f"invalid offset range [{r.start}, {r.end}) for {r.queue}")


def split_ranges(ranges: Iterable[OffsetRange], max_messages_per_partition: int | None) -> list[OffsetRange]:
    """Split each range larger than the limit into ``ceil(size / limit)`` consecutive, near-equal
    chunks (like Spark's maxRecordsPerPartition); order kept, empty ranges dropped."""
    if max_messages_per_partition is not None and (
        isinstance(max_messages_per_partition, bool)
        or not isinstance(max_messages_per_partition, int)
        or max_messages_per_partition < 1
    ):
        raise OptionError("maxMessagesPerPartition", "must be a positive integer", max_messages_per_partition)
    result = []
    for r in ranges:
        _check_range(r)
        if r.size == 0:
            continue
        if max_messages_per_partition is None or r.size <= max_messages_per_partition:
            result.append(r)
            continue
        parts = -(-r.size // max_messages_per_partition)
        cuts = [r.start + r.size * k // parts for k in range(parts + 1)]
        result.extend(OffsetRange(r.queue, a, b) for a, b in zip(cuts, cuts[1:], strict=False))
    return result


def task_ids(num_tasks: int) -> list[str]:
    """``task-000`` .. ``task-<N-1>``, zero-padded so string order is numeric order."""
    width = max(3, len(str(num_tasks - 1)))
    return [f"task-{i:0{width}d}" for i in range(num_tasks)]


def plan_partitions(
    ranges: Iterable[OffsetRange],
    num_tasks: int,
    strategy: str = "AVG",
    max_messages_per_partition: int | None = None,
    *,
    require_all: bool = True,
    **strategy_args: Any,
) -> list[list[OffsetRange]]:
    """Group the ranges into tasks as a consumer group of ``num_tasks`` members would share the queues.

    The tasks are consumer ids :func:`task_ids` of one group; each gets the queues ``strategy`` allocates
    to it among the queues that have messages to read, with its ranges in queue-offset order, split by
    ``max_messages_per_partition``. Tasks with nothing to read are left out. A queue given to two tasks
    (e.g. CONFIG) is an AllocationError; so is a queue given to none (e.g. MACHINE_ROOM filtering it out)
    unless ``require_all=False`` — otherwise its offsets would advance without its messages being read.
    """
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
        raise AllocationError(f"num_tasks must be a positive integer (got {num_tasks!r})")
    by_queue: dict[QueueKey, list[OffsetRange]] = {}
    for r in ranges:
        _check_range(r)
        if r.size > 0:
            by_queue.setdefault(r.queue, []).append(r)
    if not by_queue:
        return []
    assignment = allocate_all(strategy, by_queue, task_ids(num_tasks), **strategy_args)
    owners: dict[QueueKey, str] = {}
    for cid, queues in assignment.items():
        for q in queues:
            if q in owners or q not in by_queue:
                what = f"allocated twice ({owners[q]} and {cid})" if q in owners else "not a planned queue"
                raise AllocationError(f"{strategy}: {q} {what}")
            owners[q] = cid
    unassigned = [str(q) for q in by_queue if q not in owners]
    if unassigned and require_all:
        raise AllocationError(f"{strategy} leaves queues with messages to no task: {', '.join(unassigned)}")
    plan = []
    for cid in task_ids(num_tasks):
        task = []
        for q in assignment.get(cid, []):
            task += split_ranges(sorted(by_queue[q], key=lambda r: r.start), max_messages_per_partition)
        if task:
            plan.append(task)
    return plan


# The default plan (no task count given): Kafka-like, one task per queue range with data, but a range
# above DEFAULT_SPLIT_MESSAGES is split (a big backlog is read by many executors) and ranges below
# DEFAULT_PACK_MESSAGES share tasks (each task costs Spark ~30 ms of Python worker start-up, more than
# reading a few thousand messages).
DEFAULT_SPLIT_MESSAGES = 262_144
DEFAULT_PACK_MESSAGES = 8_192


def plan_default(
    ranges: Iterable[OffsetRange],
    max_messages_per_partition: int | None = None,
    *,
    split_messages: int = DEFAULT_SPLIT_MESSAGES,
    pack_messages: int = DEFAULT_PACK_MESSAGES,
) -> list[list[OffsetRange]]:
    """Tasks for ranges when no task count is given, in queue order.

    Every range with messages is read; one above ``split_messages`` (``max_messages_per_partition`` when
    given) is cut into near-equal consecutive chunks no larger than that; a chunk of at least
    ``pack_messages`` is a task of its own, and smaller ones are packed, in queue order, into tasks of at
    most ``pack_messages`` messages (and at most ``max_messages_per_partition``), so no task reads more
    than ``max_messages_per_partition`` messages.
    """
    limit = max_messages_per_partition
    chunks = split_ranges(sorted(ranges, key=lambda r: (r.queue, r.start)), limit or split_messages)
    pack = min(pack_messages, limit) if limit else pack_messages
    plan: list[list[OffsetRange]] = []
    packed: list[OffsetRange] = []
    packed_size = 0
    for chunk in chunks:
        if chunk.size >= pack:
            plan.append([chunk])
            continue
        if packed and packed_size + chunk.size > pack:
            packed, packed_size = [], 0
        if not packed:
            plan.append(packed)   # the pack task takes its place in queue order when it opens
        packed.append(chunk)
        packed_size += chunk.size
    return plan


# The default plan by bytes (plan_by_bytes), Spark's file-source planning (FilePartition.maxSplitBytes and
# getFilePartitions) over queue ranges: spark.sql.files.maxPartitionBytes' default target, and an open cost per
# range (Spark's openCostInBytes default, 4 MiB, models a file open and would give a 1,024-queue read of one
# message each 32 tasks, ~0.1 s of Python worker each on local[2]). Network mode: 256 KiB, a range's pulls.
# Local mode: 64 KiB — a task reads a range's units where they are (no queue opened), about 25 µs of CPU a
# range, as much as reading 16–40 KiB of stored messages (650 MB/s at 256-byte bodies, 1.6 GB/s at 4 KiB;
# bench_planning.py --query), so a thousand one-message queues are one task, not two (issue 21).
DEFAULT_MAX_PARTITION_BYTES = 128 << 20
DEFAULT_OPEN_COST_BYTES = 256 << 10
DEFAULT_LOCAL_OPEN_COST_BYTES = 64 << 10


def plan_by_bytes(
    ranges: Iterable[OffsetRange],
    range_bytes: Iterable[int],
    *,
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
    open_cost: int = DEFAULT_OPEN_COST_BYTES,
    min_partitions: int = 1,
    max_messages_per_partition: int | None = None,
) -> list[list[OffsetRange]]:
    """Tasks for ``ranges`` of ``range_bytes`` stored bytes each, as Spark plans files into partitions.

    The split size is ``min(max_partition_bytes, max(open_cost, total / min_partitions))`` where ``total``
    counts every range's bytes plus ``open_cost`` (``FilePartition.maxSplitBytes``: with ``min_partitions``
    tasks' worth of data there are at least about that many tasks). A range above the split size (or above
    ``max_messages_per_partition`` messages) is cut into near-equal consecutive chunks by message count
    (sizes taken as even within a range). Chunks are packed in queue order, a task closed when the next
    chunk's bytes would take it past the split size (``getFilePartitions``: each chunk then adds its bytes
    plus ``open_cost``) or its messages past ``max_messages_per_partition``. Empty ranges are dropped.
    """
    limit = max_messages_per_partition
    for name, value in (("maxPartitionBytes", max_partition_bytes), ("openCostInBytes", open_cost),
                        ("minPartitions", min_partitions), ("maxMessagesPerPartition", limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < (0 if name == "openCostInBytes" else 1)):
            raise OptionError(name, "must be a positive integer", value)
    pairs = sorted(zip(ranges, range_bytes, strict=True), key=lambda p: (p[0].queue, p[0].start))
    for r, b in pairs:
        _check_range(r)
        if b < 0:
            raise RocketStreamError(f"negative byte count {b} for {r.queue} [{r.start}, {r.end})")
    pairs = [(r, b) for r, b in pairs if r.size > 0]
    total = sum(b + open_cost for _, b in pairs)
    split = min(max_partition_bytes, max(open_cost, -(-total // min_partitions)))
    split = max(split, 1)
    plan: list[list[OffsetRange]] = []
    task: list[OffsetRange] = []
    task_bytes = task_messages = 0
    for r, b in pairs:
        parts = max(-(-b // split), -(-r.size // limit) if limit else 1, 1)
        parts = min(parts, r.size)
        cuts = [r.start + r.size * k // parts for k in range(parts + 1)]
        for a, z in zip(cuts, cuts[1:], strict=False):
            chunk_bytes = b * (z - a) // r.size
            if task and (task_bytes + chunk_bytes > split or (limit and task_messages + z - a > limit)):
                plan.append(task)
                task, task_bytes, task_messages = [], 0, 0
            task.append(OffsetRange(r.queue, a, z))
            task_bytes += chunk_bytes + open_cost
            task_messages += z - a
    if task:
        plan.append(task)
    return plan


def rate_limit(
    start: Mapping[QueueKey, int],
    latest: Mapping[QueueKey, int],
    max_messages: int | None = None,
    max_bytes: int | None = None,
    bytes_fn: Callable[..., np.ndarray] | None = None,
    min_messages: int | None = None,
    byte_cap: int | None = None,
    bytes_many: Callable[[list[tuple[QueueKey, int, int]], int | None], list[np.ndarray]] | None = None,
) -> dict[QueueKey, int]:
    """End offsets for the next micro-batch, for every queue of ``latest``.

    * ``min_messages`` (minOffsetsPerTrigger): fewer messages available -> ``start`` unchanged (no batch;
      the caller drops this limit once maxTriggerDelay has passed).
    * ``max_messages`` (maxOffsetsPerTrigger): spread over the queues in proportion to their backlog, as
      Spark's Kafka source does, but with largest-remainder rounding so the total never exceeds the limit.
    * ``max_bytes`` (maxBytesPerTrigger): ``bytes_fn(queue, start, end)`` returns the stored sizes of the
      messages ``[start, end)`` (the consume-queue size field); see :func:`_limit_bytes`.
    * ``byte_cap`` (>= ``max_bytes``; network mode passes ``max_bytes``): sizes are asked as
      ``bytes_fn(queue, start, end, byte_cap)``, which may stop after the first message at which their
      running total exceeds ``byte_cap``, and each queue's backlog weighs at most ``byte_cap`` bytes when
      the budget is shared. No queue can take more than ``max_bytes``, so nothing past that prefix is
      needed — a backlog of millions of messages costs only its first ``byte_cap`` bytes of sizes.
      None: the whole backlog is sized and weighed (local mode, where sizes are a read of the consume queue).
    * ``bytes_many(ranges, byte_cap)``, when given, is asked instead of ``bytes_fn`` for the sizes of every
      ``(queue, start, end)`` at once (network mode: the queues' requests in flight together), with the
      same contract for each range.

    Queues with no backlog (latest <= start) get ``latest``, like Spark. Never beyond ``latest``.
    """
    missing = [str(q) for q in latest if q not in start]
    if missing:
        raise RocketStreamError(f"rate_limit: no start offset for {', '.join(missing)}")
    for name, value in (("maxOffsetsPerTrigger", max_messages), ("maxBytesPerTrigger", max_bytes),
                        ("minOffsetsPerTrigger", min_messages)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise OptionError(name, "must be a positive integer", value)
    if max_bytes is not None and bytes_fn is None and bytes_many is None:
        raise RocketStreamError("rate_limit: max_bytes needs bytes_fn")
    if byte_cap is not None and (max_bytes is None or isinstance(byte_cap, bool) or not isinstance(byte_cap, int)
                                 or byte_cap < max_bytes):
        raise RocketStreamError(f"rate_limit: byte_cap {byte_cap!r} must be an integer >= max_bytes ({max_bytes})")
    backlog = {q: latest[q] - start[q] for q in sorted(latest) if latest[q] > start[q]}
    total = sum(backlog.values())
    if min_messages is not None and total < min_messages:
        return {q: (start[q] if q in backlog else latest[q]) for q in latest}
    ends = dict(latest)
    if max_messages is not None and total > max_messages:
        shares = _proportional(max_messages, backlog)
        ends.update({q: start[q] + shares[q] for q in backlog})
    if max_bytes is not None:   # bytes_fn or bytes_many is set with max_bytes (checked above)
        asks = [(q, start[q], ends[q]) for q in backlog if ends[q] > start[q]]
        if bytes_many is not None:
            found = bytes_many(asks, byte_cap)
        else:
            assert bytes_fn is not None
            found = [bytes_fn(q, a, b) if byte_cap is None else bytes_fn(q, a, b, byte_cap) for q, a, b in asks]
        if len(found) != len(asks):
            raise RocketStreamError(f"rate_limit: {len(found)} size arrays for {len(asks)} queue ranges")
        sizes = {q: s for (q, _, _), s in zip(asks, found, strict=True)}
        ends.update(_limit_bytes(start, ends, backlog, max_bytes, sizes, byte_cap))
    return ends


def _proportional(budget: int, weights: Mapping[QueueKey, int]) -> dict[QueueKey, int]:
    """Integer shares of ``budget`` in proportion to ``weights`` (sum <= budget, each <= weight):
    floors first, then one more to the largest remainders (ties in queue order)."""
    total = sum(weights.values())
    if total <= budget:
        return dict(weights)
    shares = {q: budget * w // total for q, w in weights.items()}
    left = budget - sum(shares.values())
    by_remainder = sorted(weights, key=lambda q: -(budget * weights[q] % total))
    for q in by_remainder[:left]:
        shares[q] += 1
    return shares


def _limit_bytes(
    start: Mapping[QueueKey, int],
    ends: Mapping[QueueKey, int],
    backlog: Mapping[QueueKey, int],
    max_bytes: int,
    found: Mapping[QueueKey, np.ndarray],
    byte_cap: int | None = None,
) -> dict[QueueKey, int]:
    """Largest ends whose messages total at most ``max_bytes``, and at least one message overall, from the
    ``found`` sizes of each queue with messages to read (:func:`rate_limit`).

    1. A queue whose next message alone exceeds ``max_bytes`` gets a batch of its own (that one message),
       so it is read as soon as it reaches the head instead of waiting forever.
    2. Every queue's head message, in queue order, while they fit (no queue starves behind a big one).
    3. The rest of the budget in proportion to each queue's remaining bytes (counted up to ``byte_cap``
       when given); what message boundaries leave over goes first to the queues furthest below their
       share of ``max_bytes``.
    """
    cum: dict[QueueKey, np.ndarray] = {}
    weight: dict[QueueKey, int] = {}   # the queue's backlog bytes as the sharing counts them
    for q in backlog:
        n = ends[q] - start[q]
        if n > 0:
            sizes = np.asarray(found[q], dtype=np.int64)
            if sizes.ndim != 1 or not 0 < len(sizes) <= n or sizes.min() <= 0 or (
                    len(sizes) < n and (byte_cap is None or int(sizes.sum()) <= byte_cap)):
                cap = f"; a prefix only past {byte_cap} bytes" if byte_cap is not None else ""
                raise RocketStreamError(
                    f"bytes_fn must give {n} positive sizes for {q} [{start[q]}, {ends[q]}){cap}, "
                    f"gave shape {sizes.shape}"
                )
            cum[q] = np.cumsum(sizes)
            weight[q] = int(cum[q][-1]) if byte_cap is None else min(int(cum[q][-1]), byte_cap)
    if sum(int(c[-1]) for c in cum.values()) <= max_bytes:   # a prefix exceeds byte_cap >= max_bytes
        return dict(ends)
    for q, c in cum.items():
        if c[0] > max_bytes:
            return {p: (start[p] + 1 if p == q else start[p]) for p in backlog}
    taken = {q: 0 for q in cum}
    budget = max_bytes
    for q, c in cum.items():
        if c[0] <= budget:
            taken[q], budget = 1, budget - int(c[0])
    # Below, every search stays within max_bytes of the queue's start, inside any prefix bytes_fn gave.
    used = {q: int(c[taken[q] - 1]) if taken[q] else 0 for q, c in cum.items()}
    remaining = {q: weight[q] - used[q] for q in cum if taken[q] and weight[q] > used[q]}
    for q, share in _proportional(budget, remaining).items():
        n = int(np.searchsorted(cum[q], used[q] + share, side="right"))
        budget -= int(cum[q][n - 1]) - used[q]
        taken[q], used[q] = n, int(cum[q][n - 1])
    # Leftover (lost to message boundaries): queues furthest below their proportional share first.
    total = sum(weight.values())
    behind = sorted((q for q in cum if taken[q]), key=lambda q: used[q] * total - max_bytes * weight[q])
    for q in behind:
        n = int(np.searchsorted(cum[q], used[q] + budget, side="right"))
        budget -= int(cum[q][n - 1]) - used[q]
        taken[q], used[q] = n, int(cum[q][n - 1])
    return {q: start[q] + taken[q] for q in cum} | {q: start[q] for q in backlog if q not in cum}


def offsets_to_dict(offsets: Mapping[QueueKey, int]) -> dict[str, dict[str, dict[str, int]]]:
    """``{topic: {brokerName: {queueId: next offset}}}`` with keys in a fixed order (topics and brokers by
    Java string order, queue ids numerically), because Spark compares checkpointed offsets as strings."""
    nested: dict[str, dict[str, dict[str, int]]] = {}
    for q in sorted(offsets):
        nested.setdefault(q.topic, {}).setdefault(q.broker_name, {})[str(q.queue_id)] = int(offsets[q])
    return nested


def offsets_to_json(offsets: Mapping[QueueKey, int]) -> str:
    return json.dumps(offsets_to_dict(offsets), separators=(",", ":"), ensure_ascii=False)


def offsets_from_json(text: str, *, option: str = "offsets", allow_special: bool = True) -> dict[QueueKey, int]:
    """Parse the offset JSON; anything malformed is an OptionError naming ``option``.

    ``allow_special`` admits -2 (earliest) and -1 (latest) as user-written values."""
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates)
    except (json.JSONDecodeError, TypeError) as exc:
        raise OptionError(option, f"is not valid JSON: {exc}", text) from exc
    except _DuplicateKey as exc:
        raise OptionError(option, f"repeats the key {exc.args[0]!r}", text) from exc
    return offsets_from_dict(obj, option=option, allow_special=allow_special)


def offsets_from_dict(obj: object, *, option: str = "offsets", allow_special: bool = True) -> dict[QueueKey, int]:
    """The same validation for an already-decoded object (what Spark hands back to a stream reader)."""
    shape = 'expected {"<topic>": {"<brokerName>": {"<queueId>": <offset>}}}'
    if not isinstance(obj, dict):
        raise OptionError(option, f"{shape}, got a JSON {type(obj).__name__}")
    lowest = EARLIEST if allow_special else 0
    result: dict[QueueKey, int] = {}
    for topic, brokers in obj.items():
        if not isinstance(brokers, dict):
            raise OptionError(option, f"topic {topic!r} must map to an object of brokers; {shape}")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise OptionError(option, f"{topic}/{broker} must map to an object of queue ids; {shape}")
            for qid, offset in queues.items():
                if not _QUEUE_ID.match(qid) or int(qid) > 0x7FFFFFFF:
                    raise OptionError(option, f"{topic}/{broker}: queue id {qid!r} is not a non-negative integer")
                if isinstance(offset, bool) or not isinstance(offset, int) or not lowest <= offset <= _INT64_MAX:
                    allowed = "-2 (earliest), -1 (latest) or an offset >= 0" if allow_special else "an offset >= 0"
                    raise OptionError(option, f"{topic}/{broker}/{qid}: offset must be {allowed}", offset)
                result[QueueKey(topic, broker, int(qid))] = offset
    return result


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise _DuplicateKey(k)
        seen[k] = v
    return seen


__all__ = [
    "DEFAULT_PACK_MESSAGES", "DEFAULT_SPLIT_MESSAGES", "EARLIEST", "LATEST", "OffsetRange", "QueueKey",
    "offsets_from_dict", "offsets_from_json", "offsets_to_dict", "offsets_to_json", "plan_default",
    "plan_partitions", "ranges_between", "rate_limit", "split_ranges", "task_ids",
]
