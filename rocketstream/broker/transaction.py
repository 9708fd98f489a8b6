"""Transactional messages, as RocketMQ 4.9.8's broker keeps them (``TransactionalMessageBridge``,
``TransactionalMessageServiceImpl``, ``EndTransactionProcessor``, ``TransactionalMessageCheckService``,
``DefaultTransactionalMessageCheckListener``).

**Half message.** A send whose ``TRAN_MSG`` property is true (send.py) is stored by
:func:`half_message` in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with its real topic and queue id in
``REAL_TOPIC`` / ``REAL_QID`` and the transaction bits of its sysFlag cleared (``parseHalfMessageInner``):
a plain record there, which no consumer subscribes to. The send's answer carries the half record's
offsetMsgId and half-queue offset, with the real queue id.

**END_TRANSACTION (37)** (:func:`end_transaction`): the half record is found by ``commitLogOffset``, its
``PGROUP``, queue offset and commit-log offset must match the header's ``producerGroup``,
``tranStateTableOffset`` and ``commitLogOffset`` (``checkPrepareMessage``). Commit re-puts it to its real
topic and queue (:func:`committed_message`: sysFlag COMMIT (8), ``preparedTransactionOffset`` = the half's
commit-log offset, the half's properties string unchanged - so ``REAL_TOPIC``, ``REAL_QID``, ``TRAN_MSG`` and
``PGROUP`` stay); rollback puts nothing. Both then write the op record (:func:`op_message`): topic
``RMQ_SYS_TRANS_OP_HALF_TOPIC``, same queue id as the half queue, tag ``d``, body the half message's queue
offset in decimal (``addRemoveTagInTransactionOp``). The op topic gets no topic config (it lives in the store
only, as in 4.9.8). A commit/rollback flag of 0 (a check-back answered UNKNOW) is logged and ignored.

**Check-back** (:class:`TransactionalMessageCheckService`, every ``transactionCheckInterval`` ms): per half
queue, from the ``CID_RMQ_SYS_TRANS`` consumer offsets of the half and op queues, the op records read so far
say which half offsets are done; a half message with no op record, older than ``transactionTimeOut`` (or its
``CHECK_IMMUNITY_TIME_IN_SECONDS``), is written again to the half queue with ``TRANSACTION_CHECK_TIMES``
raised and CHECK_TRANSACTION_STATE (39) goes, oneway, to one live producer channel of its ``PGROUP`` with the
re-written record (real topic and queue id) as body. One already checked ``transactionCheckMax`` times (or
older than the store's ``fileReservedTime``) is moved to ``TRANS_CHECK_MAX_TIME_TOPIC`` (one queue, created
on first use) instead. The two consumer offsets then advance as ``check`` advances them. The whole pass runs
on the broker's event loop in slices (never more than :data:`SLICE` records between two yields).

**Bytes.** Every record written here is the one 4.9.8 writes (read back from stores the real broker wrote in
the same scenarios, tests/broker/test_transaction.py and tests/client/test_transaction_brokers.py): properties
strings built by the broker are a Java ``HashMap``'s iteration order (:func:`java_hashmap_ordered`) with no
separator after the last pair; the op record carries ``WAIT=true`` and ``TAGS=d`` and no UNIQ_KEY, born and
stored by the broker's own address; a check request's body carries ``WAIT=false`` (the map 4.9.8 encodes it
from). The half topic gets its topic config (1 queue) from the check service, the op topic none; the
``CID_RMQ_SYS_TRANS`` offsets land in ``consumerOffset.json`` like any group's.

Deviations, on purpose: END_TRANSACTION only accepts a record of the half topic (4.9.8 would also "commit" any
record whose properties happen to match); a pass stops at a half message that is neither due nor done once no
op record is left to read (4.9.8 spins on it until ``MAX_PROCESS_TIME_LIMIT``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rocketstream import codec
from rocketstream.broker import acl
from rocketstream.broker.config import PERM_READ, PERM_WRITE
from rocketstream.broker.context import BrokerContext
from rocketstream.broker.topic_manager import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketstream.codec import PROPERTY_CLUSTER, PROPERTY_PRODUCER_GROUP, HostAddress, MessageRecord
from rocketstream.errors import HeaderFieldError, RemotingError, StoreError
from rocketstream.remoting.channel import Channel
from rocketstream.remoting.codes import RequestCode, ResponseCode
from rocketstream.remoting.command import RemotingCommand
from rocketstream.store.write.messages import GetMessageStatus, Message, PutMessageResult, PutMessageStatus

__all__ = ["TransactionalMessageCheckService", "register", "half_message", "committed_message", "op_message",
           "end_transaction", "java_hashmap_ordered", "SYS_TRANS_GROUP", "REMOVE_TAG", "TRANS_HALF_TOPIC",
           "TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"]

log = logging.getLogger("rocketstream.broker.transaction")

SYS_TRANS_GROUP = "CID_RMQ_SYS_TRANS"        # TransactionalMessageUtil.buildConsumerGroup
REMOVE_TAG = "d"                            # TransactionalMessageUtil.REMOVETAG
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
TCMT_QUEUE_NUMS = 1                         # AbstractTransactionalMessageCheckListener.TCMT_QUEUE_NUMS
OP_PULL_NUMS = 32                           # TransactionalMessageServiceImpl.fillOpRemoveMap: pullOpMsg(.., 32)
MAX_PROCESS_TIME_LIMIT_MS = 60000           # TransactionalMessageServiceImpl.MAX_PROCESS_TIME_LIMIT
MAX_RETRY_COUNT_WHEN_HALF_NULL = 1          # TransactionalMessageServiceImpl.MAX_RETRY_COUNT_WHEN_HALF_NULL
DEFAULT_FILE_RESERVED_TIME_H = 72           # MessageStoreConfig.fileReservedTime (needSkip)
SLICE = 64                                  # half records handled before the event loop gets a turn
# Java's HashMap<String, String> tables: MessageDecoder.string2messageProperties and Message.properties
JAVA_MAP_CAPACITY = 16
_HOST_BITS = codec.FLAG_BORNHOST_V6 | codec.FLAG_STOREHOST_V6
# getMessage statuses TransactionalMessageBridge.getMessage reads as NO_NEW_MSG (4.9.8's store makes a missing
# queue on the fly: it answers NO_MESSAGE_IN_QUEUE where ours says NO_MATCHED_LOGIC_QUEUE)
_NO_NEW_MSG = frozenset({GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.OFFSET_OVERFLOW_ONE,
                         GetMessageStatus.NO_MATCHED_LOGIC_QUEUE})


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------------- property maps


def java_hashmap_ordered(items: Iterable[tuple[str, str]], capacity: int = JAVA_MAP_CAPACITY) -> dict[str, str]:
    """The entries of a ``java.util.HashMap<String, String>(capacity)`` after ``put(k, v)`` of ``items`` in
    order, in the map's iteration order (what ``MessageDecoder.messageProperties2String`` writes): by bin
    (``(h ^ h >>> 16) & (table size - 1)``, the table doubled while the size is over 3/4 of it), entries of one
    bin in first-insertion order (a put of an existing key replaces the value in place). Bins long enough
    to be made trees (8+ entries of one bin) are not modelled."""
    table: dict[str, str] = {}
    for k, v in items:
        table[k] = v
    size = 1
    while size < capacity:
        size *= 2
    while len(table) > size * 3 // 4:
        size *= 2

    def bin_of(key: str) -> int:
        h = codec.java_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (size - 1)

    keys = list(table)
    order = sorted(range(len(keys)), key=lambda i: (bin_of(keys[i]), i))
    return {keys[i]: table[keys[i]] for i in order}


def _reput(props: Mapping[str, str], *extra: tuple[str, str]) -> dict[str, str]:
    """A stored record's properties decoded into a fresh HashMap (``string2messageProperties``), ``extra``
    put after, as the string the broker writes for them."""
    return java_hashmap_ordered([*props.items(), *extra])


# ------------------------------------------------------------------------------------- messages


def half_message(topic: str, queue_id: int, props: Mapping[str, str], *, body: bytes, flag: int, sys_flag: int,
                 born_timestamp: int, born_host: HostAddress, reconsume_times: int, cluster: str) -> Message:
    """The half record of a transactional send (``SendMessageProcessor.asyncSendMessage`` then
    ``TransactionalMessageBridge.parseHalfMessageInner``). ``props``: the header's properties in wire order.

    Java puts them into a HashMap, adds ``CLUSTER``, takes ``WAIT`` out and puts it back (so it comes last in
    its bin), adds ``REAL_TOPIC`` and ``REAL_QID`` and writes the map: that string is what is stored."""
    items = [(k, v) for k, v in props.items() if k != codec.PROPERTY_WAIT]
    items.append((PROPERTY_CLUSTER, cluster))
    if codec.PROPERTY_WAIT in props:
        items.append((codec.PROPERTY_WAIT, props[codec.PROPERTY_WAIT]))
    items.append((codec.PROPERTY_REAL_TOPIC, topic))
    items.append((codec.PROPERTY_REAL_QID, str(queue_id)))
    return Message(topic=TRANS_HALF_TOPIC, body=body, properties=java_hashmap_ordered(items), flag=flag,
                   born_timestamp=born_timestamp, born_host=born_host,
                   sys_flag=sys_flag & ~codec.TRANSACTION_MASK & ~_HOST_BITS, reconsume_times=reconsume_times,
                   as_sent=True, no_trailing_separator=True)


def _real_queue(rec: MessageRecord) -> tuple[str, int]:
    """REAL_TOPIC / REAL_QID of a half record; ValueError naming what is wrong."""
    props = rec.properties
    topic = props.get(codec.PROPERTY_REAL_TOPIC)
    raw_qid = props.get(codec.PROPERTY_REAL_QID)
    if not topic:
        raise ValueError(f"half message at commit-log offset {rec.physical_offset} has no REAL_TOPIC")
    try:
        qid = int(raw_qid or "")
    except ValueError:
        raise ValueError(f"half message at commit-log offset {rec.physical_offset}: REAL_QID={raw_qid!r} "
                         "is not a queue id") from None
    if not 0 <= qid < 2**31:
        raise ValueError(f"half message at commit-log offset {rec.physical_offset}: REAL_QID={qid} out of range")
    return topic, qid


def committed_message(rec: MessageRecord) -> tuple[Message, int]:
    """The half record as its real topic's message (``EndTransactionProcessor.endMessageTransaction``):
    sysFlag COMMIT, ``preparedTransactionOffset`` = the half's commit-log offset, the half's properties
    string as it is (Java clears REAL_TOPIC, REAL_QID and TRAN_MSG from the map after writing the string)."""
    topic, qid = _real_queue(rec)
    sys_flag = (rec.sys_flag & ~codec.TRANSACTION_MASK & ~_HOST_BITS) | codec.TRANSACTION_COMMIT
    msg = Message(topic=topic, body=rec.body, properties=dict(rec.properties), flag=rec.flag, sys_flag=sys_flag,
                  born_timestamp=rec.born_timestamp, born_host=rec.born_host, reconsume_times=rec.reconsume_times,
                  as_sent=True, prepared_transaction_offset=rec.physical_offset, no_trailing_separator=True)
    return msg, qid


def op_message(half_queue_offset: int, queue_id: int, store_host: HostAddress) -> Message:
    """The op record that marks a half message done (``addRemoveTagInTransactionOp`` / ``makeOpMessageInner``):
    a ``Message(opTopic, "d", body)`` - properties TAGS and WAIT=true, written before the broker sets WAIT
    false and a UNIQ_KEY in the map - body the half queue offset in decimal, born and stored by the broker."""
    props = java_hashmap_ordered([(codec.PROPERTY_TAGS, REMOVE_TAG), (codec.PROPERTY_WAIT, "true")])
    return Message(topic=TRANS_OP_HALF_TOPIC, body=str(half_queue_offset).encode("utf-8"), properties=props,
                   born_timestamp=_now_ms(), born_host=store_host, broker_copy=True, no_trailing_separator=True)


def discard_message(rec: MessageRecord) -> Message:
    """A half message checked ``transactionCheckMax`` times, for ``TRANS_CHECK_MAX_TIME_TOPIC``
    (``DefaultTransactionalMessageCheckListener.toMessageExtBrokerInner``): body, flag, sysFlag, hosts,
    times and properties of the half record."""
    return Message(topic=TRANS_CHECK_MAX_TIME_TOPIC, body=rec.body, properties=_reput(rec.properties),
                   flag=rec.flag, sys_flag=rec.sys_flag & ~_HOST_BITS, born_timestamp=rec.born_timestamp,
                   born_host=rec.born_host, reconsume_times=rec.reconsume_times, broker_copy=True,
                   no_trailing_separator=True)


# ----------------------------------------------------------------------------- END_TRANSACTION


@dataclass
class EndTransactionHeader:
    """``EndTransactionRequestHeader``."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool
    msg_id: str
    transaction_id: str | None

    @classmethod
    def decode(cls, request: RemotingCommand) -> EndTransactionHeader:
        commit_or_rollback = request.int_field("commitOrRollback")
        if not -(2**31) <= commit_or_rollback < 2**31:
            raise HeaderFieldError("commitOrRollback", f"is not an int32: {commit_or_rollback}")
        return cls(producer_group=request.field("producerGroup"),
                   tran_state_table_offset=request.long_field("tranStateTableOffset"),
                   commit_log_offset=request.long_field("commitLogOffset"), commit_or_rollback=commit_or_rollback,
                   from_transaction_check=bool(request.bool_field("fromTransactionCheck")),
                   msg_id=request.field("msgId"), transaction_id=request.field("transactionId", required=False))


def _half_record(controller: BrokerContext, offset: int) -> MessageRecord | None:
    """``getHalfMessageByOffset``: the half-topic record at ``offset``, None when there is none."""
    if offset < 0:
        return None
    try:
        rec = controller.store.look_message_by_offset(offset)
    except StoreError as exc:
        log.warning("END_TRANSACTION: no message at commit-log offset %d: %s", offset, exc)
        return None
    return rec if rec.topic == TRANS_HALF_TOPIC else None


def _transaction_topic(controller: BrokerContext, offset: int) -> str:
    """The topic END_TRANSACTION writes to, for the ACL (PUB): a half message's REAL_TOPIC; the record's own
    topic for any other record, so an account learns nothing of a topic it may not publish to. A record
    that cannot be read is refused (AccessDenied): no topic, no permission."""
    try:
        rec = controller.store.look_message_by_offset(offset)
    except StoreError as exc:
        raise acl.AccessDenied(f"no message at commit-log offset {offset}: {exc}", acl.FRAME_RESOURCE_PERM) from None
    if rec.topic == TRANS_HALF_TOPIC:
        return rec.properties.get(codec.PROPERTY_REAL_TOPIC) or rec.topic
    return rec.topic


def _check_prepare_message(rec: MessageRecord, header: EndTransactionHeader) -> str | None:
    """``checkPrepareMessage``: the remark of the mismatch, None when the record is the header's."""
    if rec.properties.get(PROPERTY_PRODUCER_GROUP) != header.producer_group:
        return "The producer group wrong"
    if rec.queue_offset != header.tran_state_table_offset:
        return "The transaction state table offset wrong"
    if rec.physical_offset != header.commit_log_offset:
        return "The commit log offset wrong"
    return None


def _final_response(request: RemotingCommand, result: PutMessageResult) -> RemotingCommand:
    """``EndTransactionProcessor.sendFinalMessage``'s answer for a put."""
    status = result.status
    if status in (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT):
        return request.response(ResponseCode.SUCCESS)
    if status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED:
        return request.response(ResponseCode.SYSTEM_ERROR, "Create mapped file failed.")
    if status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
        return request.response(ResponseCode.MESSAGE_ILLEGAL,
                                "The message is illegal, maybe msg body or properties length not matched. msg body "
                                "length limit 128k, msg properties length limit 32k.")
    if status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
        return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, "Service not available now.")
    return request.response(ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR")


def end_transaction(controller: BrokerContext, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
    """END_TRANSACTION (37): ``EndTransactionProcessor.processRequest`` (see the module doc)."""
    header = EndTransactionHeader.decode(request)
    kind = header.commit_or_rollback
    how = "by check-back" if header.from_transaction_check else "by the producer"
    if kind == codec.TRANSACTION_NOT_TYPE:
        log.warning("transaction %s of group %s from %s left undecided %s (UNKNOW)", header.msg_id,
                    header.producer_group, channel.addr, how)
        return None
    if kind not in (codec.TRANSACTION_COMMIT, codec.TRANSACTION_ROLLBACK):
        log.warning("END_TRANSACTION from %s: commitOrRollback=%d is neither commit (8) nor rollback (12)",
                    channel.addr, kind)
        return None
    refused = acl.refuse_unless(controller, channel, request,
                                lambda: {_transaction_topic(controller, header.commit_log_offset): acl.Perm.PUB})
    if refused is not None:
        return refused
    rec = _half_record(controller, header.commit_log_offset)
    if rec is None:
        return request.response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
    problem = _check_prepare_message(rec, header)
    if problem is not None:
        return request.response(ResponseCode.SYSTEM_ERROR, problem)
    if kind == codec.TRANSACTION_COMMIT:
        try:
            msg, qid = committed_message(rec)
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        result = controller.store.put_message(msg, qid)
        response = _final_response(request, result)
        if response.code != ResponseCode.SUCCESS:
            return response
        log.debug("transaction %s committed %s: %s/%d", header.msg_id, how, msg.topic, qid)
    else:
        response = request.response(ResponseCode.SUCCESS)
        log.debug("transaction %s rolled back %s", header.msg_id, how)
    _put_op(controller, rec)
    return response


def _put_op(controller: BrokerContext, rec: MessageRecord) -> bool:
    """``deletePrepareMessage``: the op record of a half message; False (logged) when the store refused it."""
    op = op_message(rec.queue_offset, rec.queue_id, controller.store.config.store_host)
    result = controller.store.put_message(op, rec.queue_id, create_topic=False)   # the op topic has no config
    if not result.ok:
        log.warning("transaction op record for half offset %d not written: %s %s", rec.queue_offset,
                    result.status.name, result.reason)
    return result.ok


# ---------------------------------------------------------------------------------- check-back


def _long_or_minus_one(text: str | None) -> int:
    """``TransactionalMessageServiceImpl.getLong``: -1 for anything that is not a long."""
    try:
        return int(text or "")
    except ValueError:
        return -1


@dataclass
class _OpState:
    """One half queue's op records read so far (``removeMap``, ``doneOpOffset``) and the last op pull."""

    remove_map: dict[int, int] = field(default_factory=dict)   # half queue offset -> op queue offset
    done_op_offsets: list[int] = field(default_factory=list)
    next_op_offset: int = 0
    last_found: list[MessageRecord] | None = None              # the last pull's messages (None: none found)


class TransactionalMessageCheckService:
    """``TransactionalMessageCheckService`` + ``TransactionalMessageServiceImpl.check`` + the check listener.

    ``timeout_ms`` (transactionTimeOut), ``check_max`` (transactionCheckMax) and ``interval_ms``
    (transactionCheckInterval) come from the broker config. :meth:`check` runs one pass (tests call it);
    :meth:`start` runs one every interval on the loop. Counters for tests: ``checks_sent``, ``discarded``.
    """

    def __init__(self, controller: BrokerContext, *, timeout_ms: int, check_max: int, interval_ms: int) -> None:
        self.controller = controller
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        self.interval_ms = interval_ms
        self.checks_sent = 0
        self.discarded = 0
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle
    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="TransactionalMessageCheckService")

    def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(max(self.interval_ms, 1) / 1000.0)   # ServiceThread.waitForRunning(checkInterval)
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:   # TransactionalMessageServiceImpl.check's catch: logged, next pass goes on
                log.exception("transaction check pass failed")

    # --- one pass
    async def check(self) -> None:
        """One pass over every half queue (``TransactionalMessageServiceImpl.check``)."""
        c = self.controller
        tc = c.topics.get(TRANS_HALF_TOPIC)
        if tc is None:   # fetchMessageQueues: createTopicInSendMessageBackMethod(halfTopic, 1, RW, 0)
            tc = c.topics.create_in_send_back(TRANS_HALF_TOPIC, 1, PERM_READ | PERM_WRITE)
        for queue_id in range(tc.read_queue_nums):
            await self._check_queue(queue_id)

    def _fetch_offset(self, topic: str, queue_id: int) -> int:
        """``TransactionalMessageBridge.fetchConsumeOffset``: the group's offset, else the queue's min."""
        offset = self.controller.offsets.query_offset(SYS_TRANS_GROUP, topic, queue_id)
        if offset == -1:
            offset = self.controller.store.min_offset(topic, queue_id)
        return offset

    def _update_offset(self, topic: str, queue_id: int, offset: int) -> None:
        self.controller.offsets.commit_offset(self.controller.broker_addr, SYS_TRANS_GROUP, topic, queue_id, offset)

    def _fill_op_remove_map(self, state: _OpState, queue_id: int, op_offset: int, half_offset: int) -> bool:
        """``fillOpRemoveMap``: pull up to 32 op records from ``op_offset``; False when the pull failed."""
        res = self.controller.store.get_message(SYS_TRANS_GROUP, TRANS_OP_HALF_TOPIC, queue_id, op_offset, OP_PULL_NUMS)
        state.next_op_offset = res.next_begin_offset
        state.last_found = None
        if res.status in _NO_NEW_MSG:
            return True
        if res.status is not GetMessageStatus.FOUND:   # OFFSET_ILLEGAL / NO_MATCHED_MSG: move the op offset
            self._update_offset(TRANS_OP_HALF_TOPIC, queue_id, res.next_begin_offset)
            return True
        state.last_found = res.messages or None
        for op in res.messages:
            if op.properties.get(codec.PROPERTY_TAGS) != REMOVE_TAG:
                log.error("Found a illegal tag in op message at %s/%d offset %d", TRANS_OP_HALF_TOPIC, queue_id,
                          op.queue_offset)
                continue
            half = _long_or_minus_one(op.body.decode("utf-8", "replace"))
            if half < half_offset:
                state.done_op_offsets.append(op.queue_offset)
            else:
                state.remove_map[half] = op.queue_offset
        return True

    def _half_at(self, queue_id: int, offset: int) -> tuple[MessageRecord | None, GetMessageStatus, int]:
        """``getHalfMsg``: (record or None, status, next begin offset)."""
        res = self.controller.store.get_message(SYS_TRANS_GROUP, TRANS_HALF_TOPIC, queue_id, offset, 1)
        rec = res.messages[0] if res.status is GetMessageStatus.FOUND and res.messages else None
        return rec, res.status, res.next_begin_offset

    async def _check_queue(self, queue_id: int) -> None:
        """One half queue (the loop of ``TransactionalMessageServiceImpl.check``): from the group's half
        offset, skip what the op records mark done, discard, keep immune, or check back what is due, and stop
        at the first message too young or stored after the pass began; then move the two offsets."""
        start = _now_ms()
        half_offset = self._fetch_offset(TRANS_HALF_TOPIC, queue_id)
        op_offset = self._fetch_offset(TRANS_OP_HALF_TOPIC, queue_id)
        if half_offset < 0 or op_offset < 0:
            log.error("transaction check: bad offsets of queue %d: half %d, op %d", queue_id, half_offset, op_offset)
            return
        state = _OpState()
        self._fill_op_remove_map(state, queue_id, op_offset, half_offset)
        null_count = 1
        new_offset = i = half_offset
        handled = 0
        while True:
            if _now_ms() - start > MAX_PROCESS_TIME_LIMIT_MS:
                log.info("transaction check of queue %d stopped after %d ms", queue_id, MAX_PROCESS_TIME_LIMIT_MS)
                break
            handled += 1
            if handled % SLICE == 0:
                await asyncio.sleep(0)
            if i in state.remove_map:
                state.done_op_offsets.append(state.remove_map.pop(i))
                new_offset = i = i + 1
                continue
            rec, status, next_begin = self._half_at(queue_id, i)
            if rec is None:
                null_count += 1
                if null_count > MAX_RETRY_COUNT_WHEN_HALF_NULL + 1:
                    break
                if status in _NO_NEW_MSG:
                    break
                log.info("transaction check: no half message at %s/%d offset %d (%s); going on from %d",
                         TRANS_HALF_TOPIC, queue_id, i, status.name, next_begin)
                new_offset = i = next_begin
                continue
            props = dict(rec.properties)
            discard, props = self._need_discard(props)
            now = _now_ms()
            if discard or self._need_skip(rec, now):
                self._resolve_discard(rec)
                new_offset = i = i + 1
                continue
            if rec.store_timestamp >= start:
                break
            age = now - rec.born_timestamp
            immunity = self.timeout_ms
            immunity_text = props.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
            if immunity_text is not None:
                immunity = self._immunity_time(immunity_text)
                if age < immunity and self._check_prepare_queue_offset(state, rec, props):
                    new_offset = i = i + 1
                    continue
            elif 0 <= age < immunity:
                break
            found = state.last_found
            need_check = ((found is None and age > immunity)
                          or (found is not None and found[-1].born_timestamp - start > self.timeout_ms)
                          or age <= -1)
            if not need_check:
                if found is None:
                    # no op record left to read, and still no check due: 4.9.8 spins on this offset until
                    # MAX_PROCESS_TIME_LIMIT (or until the message ages past its immunity); stop here instead,
                    # the next pass looks again
                    break
                self._fill_op_remove_map(state, queue_id, state.next_op_offset, half_offset)
                continue
            renewed = self._put_back(rec, props)
            if renewed is None:
                continue
            self._resolve_half(rec, renewed, props)
            new_offset = i = i + 1
        if new_offset != half_offset:
            self._update_offset(TRANS_HALF_TOPIC, queue_id, new_offset)
        new_op_offset = op_offset
        for done in sorted(state.done_op_offsets):   # calculateOpOffset
            if done != new_op_offset:
                break
            new_op_offset += 1
        if new_op_offset != op_offset:
            self._update_offset(TRANS_OP_HALF_TOPIC, queue_id, new_op_offset)

    def _need_discard(self, props: dict[str, str]) -> tuple[bool, dict[str, str]]:
        """``needDiscard``: True once checked ``check_max`` times; else the properties with
        TRANSACTION_CHECK_TIMES raised (1 the first time), as the map Java goes on with."""
        raw = props.get(PROPERTY_TRANSACTION_CHECK_TIMES)
        times = 1
        if raw is not None:
            times = _long_or_minus_one(raw)
            if times >= self.check_max:
                return True, props
            times += 1
        return False, _reput(props, (PROPERTY_TRANSACTION_CHECK_TIMES, str(times)))

    def _need_skip(self, rec: MessageRecord, now: int) -> bool:
        """``needSkip``: born longer ago than the store keeps files."""
        hours = self.controller.store.config.file_reserved_time_hours
        reserved_ms = int((DEFAULT_FILE_RESERVED_TIME_H if hours is None else hours) * 3600 * 1000)
        if now - rec.born_timestamp > reserved_ms:
            log.info("transaction check: half message %s is older than fileReservedTime: skipped", rec.msg_id)
            return True
        return False

    def _immunity_time(self, text: str) -> int:
        """``getImmunityTime``: the property in seconds as ms; -1 (not a number) means transactionTimeOut."""
        value = _long_or_minus_one(text)
        return self.timeout_ms if value == -1 else value * 1000

    def _check_prepare_queue_offset(self, state: _OpState, rec: MessageRecord, props: dict[str, str]) -> bool:
        """``checkPrepareQueueOffset``: a half message still immune is done when its first copy's op record
        was read, else written again with TRAN_PREPARED_QUEUE_OFFSET (``putImmunityMsgBackToHalfQueue``)."""
        prepared = props.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
        if prepared is None:
            props = _reput(props, (PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, str(rec.queue_offset)))
            return self._put_back(rec, props) is not None
        offset = _long_or_minus_one(prepared)
        if offset == -1:
            return False
        if offset in state.remove_map:
            state.done_op_offsets.append(state.remove_map.pop(offset))
            return True
        return self._put_back(rec, props) is not None

    def _put_back(self, rec: MessageRecord, props: dict[str, str]) -> tuple[int, int, str] | None:
        """``putBackHalfMsgQueue`` (``renewHalfMessageInner``): the half record again, at the end of the half
        queue, with ``props``; (new queue offset, new commit-log offset, offsetMsgId) or None."""
        msg = Message(topic=TRANS_HALF_TOPIC, body=rec.body, properties=props, flag=rec.flag,
                      sys_flag=rec.sys_flag & ~_HOST_BITS, born_timestamp=rec.born_timestamp,
                      born_host=rec.born_host, reconsume_times=rec.reconsume_times, broker_copy=True,
                   no_trailing_separator=True)
        result = self.controller.store.put_message(msg, rec.queue_id, create_topic=False)
        if not result.ok:
            log.error("transaction check: re-putting half message %s failed: %s %s", rec.msg_id,
                      result.status.name, result.reason)
            return None
        return result.queue_offset, result.physical_offset, result.offset_msg_ids[0]

    def _resolve_discard(self, rec: MessageRecord) -> None:
        """``resolveDiscardMsg``: into TRANS_CHECK_MAX_TIME_TOPIC (created with 1 queue, RW)."""
        c = self.controller
        tc = c.topics.get(TRANS_CHECK_MAX_TIME_TOPIC)
        if tc is None:   # TopicConfigManager.createTopicOfTranCheckMaxTime
            tc = c.topics.create_in_send_back(TRANS_CHECK_MAX_TIME_TOPIC, TCMT_QUEUE_NUMS, PERM_READ | PERM_WRITE)
        queue_id = random.randrange(99999999) % TCMT_QUEUE_NUMS
        result = c.store.put_message(discard_message(rec), queue_id)
        if result.ok:
            self.discarded += 1
            log.info("transaction half message %s checked %d times: moved to %s", rec.msg_id, self.check_max,
                     TRANS_CHECK_MAX_TIME_TOPIC)
        else:
            log.error("transaction half message %s not moved to %s: %s %s", rec.msg_id, TRANS_CHECK_MAX_TIME_TOPIC,
                      result.status.name, result.reason)

    def _resolve_half(self, rec: MessageRecord, renewed: tuple[int, int, str], props: dict[str, str]) -> None:
        """``resolveHalfMsg`` / ``sendCheckMessage``: CHECK_TRANSACTION_STATE, oneway, to one live producer of
        the half message's group. The body is ``MessageDecoder.encode`` of the half message as Java holds it
        then: the new queue and commit-log offsets, the real topic and queue id, ``props`` (with the raised
        TRANSACTION_CHECK_TIMES) and WAIT=false (``renewHalfMessageInner`` shares the map it sets WAIT false in,
        after writing the re-put record's string: the real broker's check bodies carry WAIT=false), everything
        else as first stored."""
        queue_offset, commit_log_offset, offset_msg_id = renewed
        try:
            topic, qid = _real_queue(rec)
        except ValueError as exc:
            log.error("transaction check: %s", exc)
            return
        group = props.get(PROPERTY_PRODUCER_GROUP)
        channel = self._available_channel(group)
        if channel is None:
            log.warning("Check transaction failed, channel is null. groupId=%s", group)
            return
        uniq = props.get(codec.PROPERTY_UNIQ_KEY)
        fields: dict[str, object] = {"tranStateTableOffset": queue_offset, "commitLogOffset": commit_log_offset,
                                     "msgId": uniq, "transactionId": uniq, "offsetMsgId": offset_msg_id}
        body_props = java_hashmap_ordered([*props.items(), (codec.PROPERTY_WAIT, "false")])
        body = codec.encode_record(topic=topic, queue_id=qid, body=rec.body, properties=body_props, flag=rec.flag,
                                   queue_offset=queue_offset, physical_offset=commit_log_offset,
                                   sys_flag=rec.sys_flag, born_timestamp=rec.born_timestamp, born_host=rec.born_host,
                                   store_timestamp=rec.store_timestamp, store_host=rec.store_host,
                                   reconsume_times=rec.reconsume_times,
                                   prepared_transaction_offset=rec.prepared_transaction_offset)
        request = RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, fields, body)
        self.checks_sent += 1
        self.controller.spawn(self._send_check(channel, request, group or ""), "check-transaction-state")

    @staticmethod
    async def _send_check(channel: Channel, request: RemotingCommand, group: str) -> None:
        try:
            await channel.invoke_oneway(request)
        except RemotingError as exc:   # Broker2Client.checkProducerTransactionState logs it
            log.warning("Check transaction failed because invoke producer exception. group=%s, msgId=%s: %s",
                        group, request.field("msgId", required=False), exc)

    def _available_channel(self, group: str | None) -> Channel | None:
        """``ProducerManager.getAvailableChannel``: a random open channel of the group's producers."""
        if not group:
            return None
        members = [info.channel for info in self.controller.producers.table.get(group, {}).values()
                   if not info.channel.closed]
        return random.choice(members) if members else None


def register(controller: BrokerContext) -> TransactionalMessageCheckService:
    """END_TRANSACTION's processor and the check service (started by the controller)."""
    controller.server.register(RequestCode.END_TRANSACTION, lambda ch, req: end_transaction(controller, ch, req))
    cfg = controller.config
    return TransactionalMessageCheckService(controller, timeout_ms=cfg.transaction_time_out,
                                            check_max=cfg.transaction_check_max,
                                            interval_ms=cfg.transaction_check_interval)
