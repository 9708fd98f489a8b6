"""CHECK_TRANSACTION_STATE (39), broker -> client: RocketMQ 4.9.8's ``ClientRemotingProcessor.checkTransactionState``.

The broker asks a producer of the half message's group whether a transaction left undecided is to be
committed or rolled back. The request is oneway (nothing is answered): the header
(``CheckTransactionStateRequestHeader``: ``tranStateTableOffset``, ``commitLogOffset``, ``msgId``,
``transactionId``, ``offsetMsgId``) is validated, the body decoded as the one stored record it is (the half
message with its real topic and queue id), and the producer registered in this client instance for the
record's ``PGROUP`` gets it (``check_transaction_state``: client/transaction.py runs the user's
``check_local_transaction`` off the loop and answers with END_TRANSACTION). A request that cannot be read, or
whose group has no transactional producer here, is logged (naming the broker and the field) and dropped, as
the Java client drops it.

Kept apart from client/transaction.py so that instance.py can import it (transaction.py imports the producer,
which imports instance.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from rocketstream.client.api import decode_messages
from rocketstream.client.common import MessageExt
from rocketstream.codec import PROPERTY_PRODUCER_GROUP
from rocketstream.errors import RemotingError
from rocketstream.remoting import Channel, RemotingCommand

__all__ = ["CheckTransactionStateHeader", "TransactionChecker", "handle_check_transaction_state"]

log = logging.getLogger("rocketstream.client")



@dataclass(frozen=True)
class CheckTransactionStateHeader:
    """``CheckTransactionStateRequestHeader``."""

    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None
    transaction_id: str | None
    offset_msg_id: str | None

    @classmethod
    def decode(cls, request: RemotingCommand) -> CheckTransactionStateHeader:
        return cls(tran_state_table_offset=request.long_field("tranStateTableOffset"),
                   commit_log_offset=request.long_field("commitLogOffset"),
                   msg_id=request.field("msgId", required=False),
                   transaction_id=request.field("transactionId", required=False),
                   offset_msg_id=request.field("offsetMsgId", required=False))


class TransactionChecker(Protocol):
    """What a producer must offer to be handed check requests (client/transaction.py's TransactionProducer)."""

    def check_transaction_state(self, broker_addr: str, msg: MessageExt,
                                header: CheckTransactionStateHeader) -> None: ...


def handle_check_transaction_state(producers: dict[str, Any], channel: Channel, request: RemotingCommand) -> None:
    """Hand the request to the producer of its group; ``producers``: the instance's group -> producer table."""
    try:
        header = CheckTransactionStateHeader.decode(request)
        msgs = decode_messages(request.body or b"", addr=channel.addr)
    except RemotingError as exc:   # HeaderFieldError / BodyError name the field or the body
        log.warning("CHECK_TRANSACTION_STATE from %s dropped: %s", channel.addr, exc)
        return None
    if len(msgs) != 1:
        log.warning("CHECK_TRANSACTION_STATE from %s dropped: the body holds %d messages, not 1", channel.addr,
                    len(msgs))
        return None
    msg = msgs[0]
    group = msg.get_property(PROPERTY_PRODUCER_GROUP)
    if group is None:
        log.warning("CHECK_TRANSACTION_STATE from %s dropped: message %s has no %s property", channel.addr,
                    msg.msg_id, PROPERTY_PRODUCER_GROUP)
        return None
    producer = producers.get(group)
    checker = getattr(producer, "check_transaction_state", None)
    if checker is None:
        log.debug("CHECK_TRANSACTION_STATE from %s for group %s: no transactional producer of it here",
                  channel.addr, group)
        return None
    checker(channel.addr, msg, header)
    return None
