"""``TransactionMQProducer``: transactional messages (RocketMQ 4.9.8's ``DefaultMQProducerImpl``
``sendMessageInTransaction`` / ``endTransaction`` / ``checkTransactionState``).

:meth:`TransactionProducer.send_message_in_transaction` sends the message as a half message (properties
``TRAN_MSG=true`` and ``PGROUP=<group>``, sysFlag TRANSACTION_PREPARED; a delay level is dropped), runs the
listener's ``execute_local_transaction(msg, arg)`` once the broker stored it, and sends END_TRANSACTION (37)
oneway to that broker with the outcome: commit (8), rollback (12) or, for UNKNOW, 0 - the broker then asks
again later. A send answered FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE is rolled back
without running the listener; a listener that raises (or returns something that is not a
:class:`LocalTransactionState`) leaves the transaction UNKNOW, with the error as the request's remark.

The broker's check-back (CHECK_TRANSACTION_STATE, client/transaction_check.py) reaches
:meth:`TransactionProducer.check_transaction_state`: the listener's ``check_local_transaction(msg)`` runs in
the producer's check thread (one, as Java's ``checkExecutor``) and its answer goes back as END_TRANSACTION with
``fromTransactionCheck=true``.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import dataclasses
import enum
import logging
from dataclasses import dataclass
from typing import Any

from rocketstream.client.common import Message, MessageExt, MessageQueue, SendResult, SendStatus, check_message
from rocketstream.client.namespace import unwrap
from rocketstream.client.producer import Producer
from rocketstream.client.transaction_check import CheckTransactionStateHeader
from rocketstream.codec import (
    PROPERTY_DELAY,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRAN_MSG,
    PROPERTY_UNIQ_KEY,
    decode_offset_msg_id,
)
from rocketstream.errors import CorruptStoreError, MQClientError, OptionError, RemotingError
from rocketstream.remoting import ONEWAY_FLAG, RemotingCommand, RequestCode, ResponseCode

__all__ = ["TransactionProducer", "TransactionListener", "LocalTransactionState", "TransactionSendResult",
           "end_transaction_request", "send_half_messages", "end_transactions", "HalfRef"]

log = logging.getLogger("rocketstream.client")

# MessageSysFlag: the commitOrRollback values of END_TRANSACTION
TRANSACTION_NOT_TYPE = 0
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


class LocalTransactionState(enum.Enum):
    """``LocalTransactionState``: what a listener decides (UNKNOW: ask me again at check-back)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


_END_CODES = {LocalTransactionState.COMMIT_MESSAGE: TRANSACTION_COMMIT_TYPE,
              LocalTransactionState.ROLLBACK_MESSAGE: TRANSACTION_ROLLBACK_TYPE,
              LocalTransactionState.UNKNOW: TRANSACTION_NOT_TYPE}


class TransactionListener(abc.ABC):
    """``TransactionListener``: subclass it and give the producer an instance."""

    @abc.abstractmethod
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        """Run the local transaction of a half message the broker has stored."""

    @abc.abstractmethod
    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """The state of the transaction of ``msg`` (the half message, as stored), asked by the broker."""


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """``TransactionSendResult``: the half message's send result and the local transaction's outcome.
    ``msg_id`` is the UNIQ_KEY, ``offset_msg_id`` / ``queue_offset`` are the half record's (its place in
    the broker's half queue), ``message_queue`` the real queue; ``transaction_id`` is the id the broker's
    check-back names the transaction by (the UNIQ_KEY)."""

    send_status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str
    local_transaction_state: LocalTransactionState


def end_transaction_request(*, producer_group: str, tran_state_table_offset: int, commit_log_offset: int,
                            state: LocalTransactionState, from_transaction_check: bool, msg_id: str,
                            transaction_id: str | None, remark: str | None) -> RemotingCommand:
    """END_TRANSACTION (37) with ``EndTransactionRequestHeader``'s fields (``MQClientAPIImpl.endTransactionOneway``)."""
    fields: dict[str, object] = {"producerGroup": producer_group, "tranStateTableOffset": tran_state_table_offset,
                                 "commitLogOffset": commit_log_offset, "commitOrRollback": _END_CODES[state],
                                 "fromTransactionCheck": from_transaction_check, "msgId": msg_id,
                                 "transactionId": transaction_id}
    request = RemotingCommand.request(RequestCode.END_TRANSACTION, fields, oneway=True)
    request.remark = remark
    return request


def _state_of(value: object, what: str) -> tuple[LocalTransactionState, str | None]:
    """A listener's answer: (state, remark); anything but a LocalTransactionState is UNKNOW, with why."""
    if value is None:
        return LocalTransactionState.UNKNOW, None   # Java: a null state counts as UNKNOW
    if isinstance(value, LocalTransactionState):
        return value, None
    log.error("%s returned %r, not a LocalTransactionState: the transaction stays UNKNOW", what, value)
    return LocalTransactionState.UNKNOW, f"{what} returned {value!r:.100}, not a LocalTransactionState"


class TransactionProducer(Producer):
    """``TransactionProducer(group, namesrv=..., transaction_listener=...)``: a :class:`Producer` that also
    sends transactional messages (:meth:`send_message_in_transaction`) and answers the broker's check-backs.
    Other keywords are the Producer's."""

    def __init__(self, group: str, *, namesrv: str, transaction_listener: TransactionListener,
                 **kwargs: Any) -> None:
        super().__init__(group, namesrv=namesrv, **kwargs)
        for method in ("execute_local_transaction", "check_local_transaction"):
            if not callable(getattr(transaction_listener, method, None)):
                raise OptionError("transaction_listener", f"needs a {method}() method (a TransactionListener)",
                                  transaction_listener)
        self.transaction_listener = transaction_listener
        self._check_executor: concurrent.futures.ThreadPoolExecutor | None = None

    def start(self) -> TransactionProducer:
        """``initTransactionEnv`` (one check thread), then the producer's start."""
        self._check_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"tx-check-{self.group}")
        try:
            super().start()
        except BaseException:
            self._check_executor.shutdown(wait=False)
            self._check_executor = None
            raise
        return self

    def shutdown(self) -> None:
        """The producer's shutdown, then ``destroyTransactionEnv`` (check-backs running finish first)."""
        try:
            super().shutdown()
        finally:
            executor, self._check_executor = self._check_executor, None
            if executor is not None:
                executor.shutdown(wait=True)

    def __enter__(self) -> TransactionProducer:
        return self.start() if self._instance is None else self

    # ------------------------------------------------------------------------- send
    def send_message_in_transaction(self, msg: Message, arg: Any = None, *,
                                    timeout: float | None = None) -> TransactionSendResult:
        """Send ``msg`` as a half message, run the local transaction, end it (see the module doc)."""
        if not isinstance(msg, Message):
            raise OptionError("msg", "must be a rocketstream.client.Message", msg)
        props = {k: v for k, v in msg.properties.items() if k != PROPERTY_DELAY}   # the delay level is ignored
        props[PROPERTY_TRAN_MSG] = "true"
        props[PROPERTY_PRODUCER_GROUP] = self.group
        half = dataclasses.replace(msg, properties=props, delay_level=0)
        check_message(half, self.max_message_size)
        result = self.send(half, timeout=timeout)
        state = LocalTransactionState.UNKNOW
        remark = None
        if result.status is SendStatus.SEND_OK:
            try:
                state, remark = _state_of(self.transaction_listener.execute_local_transaction(half, arg),
                                          "execute_local_transaction")
            except Exception as exc:   # Java: logged, the transaction stays UNKNOW, the error is the remark
                log.exception("producer %s: execute_local_transaction of %s raised", self.group, result.msg_id)
                remark = f"executeLocalTransactionBranch exception: {exc!r}"
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        self._end_transaction(result, state, remark, timeout)
        return TransactionSendResult(result.status, result.msg_id, result.offset_msg_id, result.queue,
                                     result.queue_offset, result.msg_id, state)

    def _end_transaction(self, result: SendResult, state: LocalTransactionState, remark: str | None,
                         timeout: float | None) -> None:
        """``endTransaction``: END_TRANSACTION oneway to the broker that stored the half message. A failure is
        logged, as Java logs it: the broker's check-back decides the transaction then."""
        try:
            _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id or result.msg_id)
        except (CorruptStoreError, OptionError, ValueError) as exc:
            raise MQClientError(f"send result of {result.msg_id}: offsetMsgId {result.offset_msg_id!r} "
                                f"does not decode: {exc}") from exc
        inst = self.instance
        addr = inst.broker_addr(result.queue.broker_name)
        if addr is None:
            log.warning("producer %s: no address of broker %s: transaction %s not ended (%s); the broker will "
                        "check it back", self.group, result.queue.broker_name, result.msg_id, state.name)
            return
        request = end_transaction_request(producer_group=self.group, tran_state_table_offset=result.queue_offset,
                                          commit_log_offset=commit_log_offset, state=state,
                                          from_transaction_check=False, msg_id=result.msg_id, transaction_id=None,
                                          remark=remark)
        t = self.send_msg_timeout if timeout is None else timeout
        try:
            inst.run(inst.api.invoke_oneway(addr, request, t), t + 1.0)
        except (RemotingError, MQClientError) as exc:
            log.warning("producer %s: local transaction of %s is %s, but END_TRANSACTION to %s failed: %s",
                        self.group, result.msg_id, state.name, addr, exc)

    # ------------------------------------------------------------------------- check-back
    def check_transaction_state(self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateHeader) -> None:
        """Called on the client's loop (client/transaction_check.py): the listener runs in the check thread."""
        executor = self._check_executor
        if executor is None:
            log.warning("producer %s is not started: check of %s from %s dropped", self.group, msg.msg_id,
                        broker_addr)
            return
        try:
            executor.submit(self._check, broker_addr, msg, header)
        except RuntimeError as exc:   # shut down meanwhile
            log.warning("producer %s: check of %s from %s dropped: %s", self.group, msg.msg_id, broker_addr, exc)

    def _check(self, broker_addr: str, msg: MessageExt, header: CheckTransactionStateHeader) -> None:
        """``checkTransactionState``'s task: ask the listener, answer END_TRANSACTION(fromTransactionCheck).
        The message arrives in the namespace; the listener sees its topic without it
        (``ClientRemotingProcessor.checkTransactionState``)."""
        remark = None
        if self.namespace:
            msg.topic = unwrap(self.namespace, msg.topic)
        try:
            state, remark = _state_of(self.transaction_listener.check_local_transaction(msg),
                                      "check_local_transaction")
        except Exception as exc:   # Java: logged, answered UNKNOW with the error as remark
            log.exception("producer %s: check_local_transaction of %s raised", self.group, msg.msg_id)
            state, remark = LocalTransactionState.UNKNOW, f"checkLocalTransactionState Exception: {exc!r}"
        uniq = msg.get_property(PROPERTY_UNIQ_KEY) or msg.msg_id
        request = end_transaction_request(producer_group=self.group,
                                          tran_state_table_offset=header.tran_state_table_offset,
                                          commit_log_offset=header.commit_log_offset, state=state,
                                          from_transaction_check=True, msg_id=uniq,
                                          transaction_id=header.transaction_id, remark=remark)
        inst = self._instance
        if inst is None:
            log.warning("producer %s shut down: check answer %s for %s not sent", self.group, state.name, uniq)
            return
        try:
            inst.run(inst.api.invoke_oneway(broker_addr, request, self.send_msg_timeout), self.send_msg_timeout + 1.0)
        except (RemotingError, MQClientError) as exc:
            log.warning("producer %s: check answer %s for %s to %s not sent: %s", self.group, state.name, uniq,
                        broker_addr, exc)


# ----------------------------------------------------------------------------- many transactions at once
# (the exactly-once Spark sink, rocketstream/spark/exactly_once.py: halves sent by tasks, ended by the driver)

def send_half_messages(producer: Producer, msgs: list[Message], *, transaction_group: str,
                       queue: MessageQueue | None = None, in_flight: int = 64,
                       timeout: float | None = None) -> list[SendResult]:
    """Send every message of ``msgs`` as its own half message of ``transaction_group`` (``TRAN_MSG=true``,
    ``PGROUP``; 4.9.8's ``CommitLog.putMessages`` refuses a batch of them), ``in_flight`` sends outstanding,
    each as ``producer`` sends (its retries, its timeout per send). ``producer`` need not be of
    ``transaction_group``: the broker then never asks it about these transactions (the check-back goes to a
    live producer channel of the half's PGROUP). Nothing is ended: the results, in order, say where each
    half is stored, for :func:`end_transactions`."""
    t = producer.send_msg_timeout if timeout is None else timeout
    prepared = []
    for msg in msgs:
        props = {k: v for k, v in msg.properties.items() if k != PROPERTY_DELAY}
        props[PROPERTY_TRAN_MSG] = "true"
        props[PROPERTY_PRODUCER_GROUP] = transaction_group
        half = dataclasses.replace(msg, properties=props, delay_level=0)
        check_message(half, producer.max_message_size)
        body, sys_flag, wire = producer._wire(half, compress=True)
        prepared.append((half, body, sys_flag, wire))
    if not prepared:
        return []

    async def go() -> list[SendResult]:
        gate = asyncio.Semaphore(in_flight)

        async def one(item: tuple[Message, bytes, int, dict[str, str]]) -> SendResult:
            async with gate:
                return await producer._send_async(item[0], item[1], item[2], item[3], queue, None, None, t)
        return list(await asyncio.gather(*(one(x) for x in prepared)))

    inst = producer.instance
    return inst.run(go(), t * (1 + len(prepared) / in_flight) + 5.0)


@dataclass(frozen=True, slots=True)
class HalfRef:
    """Where a half message is: its broker's address, ``tranStateTableOffset`` (the half queue offset),
    commit-log offset and UNIQ_KEY - what END_TRANSACTION names it by."""

    addr: str
    queue_offset: int
    commit_log_offset: int
    msg_id: str

    @classmethod
    def of(cls, addr: str, result: SendResult) -> HalfRef:
        try:
            _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id)
        except (CorruptStoreError, OptionError, ValueError) as exc:
            raise MQClientError(f"send result of {result.msg_id}: offsetMsgId {result.offset_msg_id!r} "
                                f"does not decode: {exc}") from exc
        return cls(addr, result.queue_offset, commit_log_offset, result.msg_id)


async def end_transactions(api: Any, group: str, halves: list[HalfRef], state: LocalTransactionState, *,
                           timeout: float, in_flight: int = 64) -> list[str | None]:
    """END_TRANSACTION for each of ``halves``, once, as a request (``invokeSync``, not Java's oneway) so
    that the broker's answer confirms it: per half None (SUCCESS: 4.9.8 ``EndTransactionProcessor`` answers
    it after the final message and the op record are put) or why not (the error or the broker's code and
    remark). ``api``: an MQClientAPI. Nothing is retried: 4.9.8 commits a half again on a second COMMIT."""
    gate = asyncio.Semaphore(in_flight)

    async def one(h: HalfRef) -> str | None:
        request = end_transaction_request(producer_group=group, tran_state_table_offset=h.queue_offset,
                                          commit_log_offset=h.commit_log_offset, state=state,
                                          from_transaction_check=False, msg_id=h.msg_id, transaction_id=None,
                                          remark=None)
        request.flag &= ~ONEWAY_FLAG
        async with gate:
            try:
                response = await api.invoke(h.addr, request, timeout)
            except RemotingError as exc:
                return f"{exc}"
        if response.code != ResponseCode.SUCCESS:
            return f"code {response.code}: {response.remark}"
        return None
    return list(await asyncio.gather(*(one(h) for h in halves)))
