"""The TransactionProducer's own rules, without a broker (the network paths, against our broker and 4.9.8, are
tests/client/test_transaction_brokers.py): the half message it sends (TRAN_MSG, PGROUP, sysFlag PREPARED, no
delay), the END_TRANSACTION it sends for each outcome (header fields of DefaultMQProducerImpl.endTransaction,
oneway, the remark of a failed listener), the check-back answer, and the CHECK_TRANSACTION_STATE requests it
drops (naming what is wrong); and README's example, run as written against our broker."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rocketstream import codec
from rocketstream.client import (
    LocalTransactionState,
    Message,
    MessageQueue,
    SendResult,
    SendStatus,
    TransactionListener,
    TransactionProducer,
)
from rocketstream.client.api import decode_messages
from rocketstream.client.transaction_check import CheckTransactionStateHeader, handle_check_transaction_state
from rocketstream.errors import OptionError
from rocketstream.remoting import RemotingCommand, RequestCode
from tests.client.test_transaction_brokers import pull_topic

S = LocalTransactionState
BROKER = "127.0.0.1:10911"


class Listener(TransactionListener):
    def __init__(self, execute: Any = S.COMMIT_MESSAGE, check: Any = S.COMMIT_MESSAGE) -> None:
        self.execute, self.check = execute, check
        self.executed: list[Message] = []

    def execute_local_transaction(self, msg, arg):
        self.executed.append(msg)
        if isinstance(self.execute, Exception):
            raise self.execute
        return self.execute

    def check_local_transaction(self, msg):
        if isinstance(self.check, Exception):
            raise self.check
        return self.check


class FakeApi:
    def __init__(self) -> None:
        self.sent: list[tuple[str, RemotingCommand]] = []

    async def invoke_oneway(self, addr: str, request: RemotingCommand, timeout: float) -> None:
        self.sent.append((addr, request))


class FakeInstance:
    """What the producer uses of MQClientInstance to end a transaction: the broker address and run()."""

    def __init__(self) -> None:
        self.api = FakeApi()

    def broker_addr(self, broker_name: str) -> str | None:
        return BROKER if broker_name == "broker-a" else None

    def run(self, coro, timeout):
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value
        raise AssertionError("the coroutine did not finish at once")


def producer_with(listener: TransactionListener, status: SendStatus = SendStatus.SEND_OK):
    p = TransactionProducer("tx_unit_pg", namesrv="127.0.0.1:9876", transaction_listener=listener)
    inst = FakeInstance()
    p._instance = inst   # type: ignore[assignment]   # stands for the started client instance
    sent: list[Message] = []

    def send(msg, timeout=None):
        sent.append(msg)
        return SendResult(status, "UNIQ1", codec.offset_msg_id(("127.0.0.1", 10911), 4096),
                          MessageQueue("Orders", "broker-a", 2), 7)
    p.send = send   # type: ignore[method-assign]
    return p, inst, sent


def end_fields(inst: FakeInstance) -> tuple[str, dict[str, str], str | None]:
    ((addr, req),) = inst.api.sent
    assert req.code == RequestCode.END_TRANSACTION and req.is_oneway
    return addr, req.ext_fields, req.remark


@pytest.mark.parametrize("state, code", [(S.COMMIT_MESSAGE, "8"), (S.ROLLBACK_MESSAGE, "12"), (S.UNKNOW, "0")])
def test_send_message_in_transaction_ends_with_the_listeners_state(state, code):
    listener = Listener(execute=state)
    p, inst, sent = producer_with(listener)
    msg = Message("Orders", b"order-1", tags="paid", keys="o-1", delay_level=3, properties={"DELAY": "3", "u": "v"})
    result = p.send_message_in_transaction(msg, "arg")
    # the half message: TRAN_MSG and PGROUP, the delay dropped (sendMessageInTransaction ignores it)
    (half,) = sent
    assert half.properties == {"u": "v", "TRAN_MSG": "true", "PGROUP": "tx_unit_pg"} and half.delay_level == 0
    assert listener.executed == [half]
    assert (result.send_status, result.local_transaction_state) == (SendStatus.SEND_OK, state)
    assert (result.msg_id, result.transaction_id, result.queue_offset) == ("UNIQ1", "UNIQ1", 7)
    assert result.message_queue == MessageQueue("Orders", "broker-a", 2)
    addr, fields, remark = end_fields(inst)
    assert addr == BROKER and remark is None
    # endTransaction's header: the half record's commit-log offset (from its offsetMsgId) and queue offset
    assert fields == {"producerGroup": "tx_unit_pg", "tranStateTableOffset": "7", "commitLogOffset": "4096",
                      "commitOrRollback": code, "fromTransactionCheck": "false", "msgId": "UNIQ1"}


def test_a_failed_local_transaction_is_unknow_with_a_remark(caplog):
    p, inst, _ = producer_with(Listener(execute=RuntimeError("db down")))
    with caplog.at_level(logging.ERROR, "rocketstream.client"):
        result = p.send_message_in_transaction(Message("Orders", b"x"))
    assert result.local_transaction_state is S.UNKNOW
    _, fields, remark = end_fields(inst)
    assert fields["commitOrRollback"] == "0" and "db down" in remark and remark.startswith("executeLocalTransaction")
    assert "db down" in caplog.text
    # an answer that is not a LocalTransactionState counts as UNKNOW too, and says so
    p, inst, _ = producer_with(Listener(execute="COMMIT"))
    assert p.send_message_in_transaction(Message("Orders", b"x")).local_transaction_state is S.UNKNOW
    assert "not a LocalTransactionState" in end_fields(inst)[2]


def test_a_send_not_flushed_is_rolled_back_without_the_listener():
    listener = Listener()
    p, inst, _ = producer_with(listener, SendStatus.FLUSH_DISK_TIMEOUT)
    result = p.send_message_in_transaction(Message("Orders", b"x"))
    assert result.local_transaction_state is S.ROLLBACK_MESSAGE and listener.executed == []
    assert end_fields(inst)[1]["commitOrRollback"] == "12"


def test_bad_arguments():
    with pytest.raises(OptionError, match="transaction_listener"):
        TransactionProducer("g1", namesrv="127.0.0.1:9876", transaction_listener=object())   # type: ignore[arg-type]
    p, _, _ = producer_with(Listener())
    with pytest.raises(OptionError, match="msg"):
        p.send_message_in_transaction(b"x")   # type: ignore[arg-type]
    with pytest.raises(OptionError, match="topic"):
        p.send_message_in_transaction(Message("bad topic", b"x"))
    with pytest.raises(OptionError, match="body"):
        p.send_message_in_transaction(Message("Orders", b""))


def test_a_half_message_goes_out_with_the_prepared_sysflag():
    p = TransactionProducer("tx_unit_pg", namesrv="127.0.0.1:9876", transaction_listener=Listener())
    _, sys_flag, props = p._wire(Message("Orders", b"x", properties={"TRAN_MSG": "true"}), compress=True)
    assert sys_flag == codec.TRANSACTION_PREPARED and props["TRAN_MSG"] == "true"
    _, sys_flag, _ = p._wire(Message("Orders", b"x"), compress=True)
    assert sys_flag == 0


def check_request(props: dict[str, str], **header: object) -> RemotingCommand:
    body = codec.encode_record(topic="Orders", queue_id=2, body=b"order", properties=props, queue_offset=5,
                               physical_offset=777, sys_flag=0, born_timestamp=1, born_host=("127.0.0.1", 5),
                               store_timestamp=2, store_host=("127.0.0.1", 10911))
    fields: dict[str, object] = {"tranStateTableOffset": 5, "commitLogOffset": 777, "msgId": "UNIQ9",
                                 "transactionId": "UNIQ9", "offsetMsgId": "X"}
    fields.update(header)
    return RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, {k: v for k, v in fields.items()
                                                                        if v is not None}, body, oneway=True)


class Channel:
    addr = BROKER


@pytest.mark.parametrize("check, code, remark", [(S.COMMIT_MESSAGE, "8", None), (S.UNKNOW, "0", None),
                                                (ValueError("lost"), "0", "checkLocalTransactionState Exception")])
def test_check_back_answered_with_end_transaction(check, code, remark):
    p, inst, _ = producer_with(Listener(check=check))
    req = check_request({"PGROUP": "tx_unit_pg", "UNIQ_KEY": "UNIQ9", "TRAN_MSG": "true"})
    msg = decode_messages(req.body)[0]
    p._check(BROKER, msg, CheckTransactionStateHeader.decode(req))
    addr, fields, got_remark = end_fields(inst)
    assert addr == BROKER
    assert fields == {"producerGroup": "tx_unit_pg", "tranStateTableOffset": "5", "commitLogOffset": "777",
                      "commitOrRollback": code, "fromTransactionCheck": "true", "msgId": "UNIQ9",
                      "transactionId": "UNIQ9"}
    assert got_remark == remark if remark is None else remark in got_remark


def test_check_requests_reach_the_producer_of_their_group_or_are_dropped(caplog):
    seen: list[tuple[str, str, int]] = []

    class Checker:
        def check_transaction_state(self, addr, msg, header):
            seen.append((addr, msg.topic, header.commit_log_offset))

    producers: dict[str, Any] = {"tx_unit_pg": Checker(), "plain": object()}
    ok = check_request({"PGROUP": "tx_unit_pg", "UNIQ_KEY": "UNIQ9"})
    assert handle_check_transaction_state(producers, Channel(), ok) is None
    assert seen == [(BROKER, "Orders", 777)]
    with caplog.at_level(logging.WARNING, "rocketstream.client"):
        for bad in (check_request({"PGROUP": "tx_unit_pg"}, commitLogOffset="x"),
                    check_request({"PGROUP": "tx_unit_pg"}, tranStateTableOffset=None),
                    check_request({"UNIQ_KEY": "U"}),
                    RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE,
                                            {"tranStateTableOffset": 1, "commitLogOffset": 2}, b"\x00\x01",
                                            oneway=True)):
            handle_check_transaction_state(producers, Channel(), bad)
        # a group with a plain producer (or none) here: nothing to do
        handle_check_transaction_state(producers, Channel(), check_request({"PGROUP": "plain"}))
        handle_check_transaction_state(producers, Channel(), check_request({"PGROUP": "elsewhere"}))
    assert len(seen) == 1
    text = caplog.text
    assert "commitLogOffset" in text and "tranStateTableOffset" in text and "PGROUP" in text and BROKER in text


def test_readme_transaction_example_runs_as_written(ours_broker, tmp_path):
    """README's TransactionProducer example against our broker (only the name-server address swapped): the
    message it commits is delivered with sysFlag 8."""
    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text()
    section = readme[readme.index("#### Transactional messages"):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match and "127.0.0.1:9876" in match.group(1)
    script = tmp_path / "tx_example.py"
    script.write_text(match.group(1).replace("127.0.0.1:9876", ours_broker.namesrv_addr))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "SendStatus.SEND_OK" in res.stdout and "LocalTransactionState.COMMIT_MESSAGE" in res.stdout
    delivered = [m for m in pull_topic(ours_broker.broker_addr, ours_broker.namesrv_addr, "Orders", 4)
                 if m.keys == "o-1"]
    assert [(m.body, m.sys_flag, m.properties["PGROUP"]) for m in delivered] == [(b"order 1 paid", 8, "order-tx")]
