"""MQClientAPI.pull's request frames (PULL_MESSAGE, PullMessageRequestHeader): from a RequestTemplate once the
connection is open and the request is not signed, and then byte for byte what encode_frame writes for the
full request; signed requests encoded in full; the answer, a timeout and a lost connection as before."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream.client.api import MQClientAPI
from rocketstream.client.common import PullStatus
from rocketstream.client.credentials import Credentials
from rocketstream.errors import RemotingConnectError, RemotingTimeoutError
from rocketstream.remoting import RemotingCommand, RequestCode, ResponseCode, encode_frame
from rocketstream.remoting.command import decode_frame

_TEXT = st.text(max_size=16)   # lone surrogates, NUL, quotes, '%' and non-ASCII included
_INT64 = st.integers(-2**63, 2**63 - 1)
_INT32 = st.integers(-2**31, 2**31 - 1)


def _full(group, topic, queue_id, offset, max_nums, sys_flag, commit, suspend, sub, sub_version, etype, opaque):
    req = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=MQClientAPI._pull_fields(
        group, topic, queue_id, offset, max_nums, sys_flag, commit, suspend, sub, sub_version, etype))
    req.opaque = opaque
    return encode_frame(req)


@settings(max_examples=100, deadline=None)
@given(group=_TEXT, topic=_TEXT, sub=st.none() | _TEXT, etype=st.sampled_from(["TAG", "SQL92"]) | _TEXT,
       queue_id=st.integers(0, 2**31 - 1), offset=_INT64, max_nums=_INT32, sys_flag=_INT32, commit=_INT64,
       suspend=_INT64, sub_version=_INT64, opaque=_INT32)
def test_pull_frames_from_the_template_are_encode_frames(group, topic, sub, etype, queue_id, offset, max_nums,
                                                         sys_flag, commit, suspend, sub_version, opaque):
    """Any header values: the template's frame is encode_frame's (twice: made, then reused), or there is no
    template (then pull encodes in full)."""
    api = MQClientAPI("127.0.0.1:1")
    for k in range(2):
        template = api._pull_request_template(group, topic, queue_id, sub, etype)
        if template is None:
            continue
        got = template.frame(opaque, offset + k, max_nums, sys_flag, commit, suspend, sub_version)
        assert got == _full(group, topic, queue_id, offset + k, max_nums, sys_flag, commit, suspend, sub,
                            sub_version, etype, opaque)


def test_usual_subscriptions_get_a_template():
    api = MQClientAPI("127.0.0.1:1")
    for sub, etype in (("*", "TAG"), ("TagA || TagB", "TAG"), ("a > 5 AND b = 'x'", "SQL92"), (None, "TAG")):
        assert api._pull_request_template("g", "%RETRY%g", 3, sub, etype) is not None


async def _broker(answer_first: int):
    """A peer that records every request frame and answers the first ``answer_first`` with PULL_NOT_FOUND
    (nextBeginOffset = queueOffset + 1), then answers nothing and closes on the frame after the next one."""
    frames: list[bytes] = []

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readexactly(4)
                data = head + await reader.readexactly(int.from_bytes(head, "big"))
                frames.append(data)
                if len(frames) > answer_first + 1:
                    return   # closes the connection
                if len(frames) > answer_first:
                    continue   # silence
                req = decode_frame(data[4:])
                nbo = int(req.ext_fields["queueOffset"]) + 1
                resp = req.response(ResponseCode.PULL_NOT_FOUND, fields={
                    "nextBeginOffset": nbo, "minOffset": 0, "maxOffset": nbo, "suggestWhichBrokerId": 0})
                writer.write(encode_frame(resp))
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}", frames


@pytest.mark.parametrize("signed", [False, True])
def test_pull_sends_the_full_requests_bytes_and_reads_the_answer(signed):
    """Three pulls on one connection (the first connects: encoded in full; then the template, unless signed):
    every frame the peer got is encode_frame of the request pull describes (signed: with AccessKey and
    Signature), and each answer is the PullResult of the peer's header."""
    cred = Credentials("ak", "sk12345678") if signed else None

    async def go():
        server, addr, frames = await _broker(3)
        api = MQClientAPI(addr, credentials=cred)
        try:
            results = []
            for k, (commit, sub_version) in enumerate(((0, 1), (77, 1), (78, 2))):
                results.append(await api.pull(
                    addr, group="G", topic="T", queue_id=2, offset=100 + k, max_nums=32, sys_flag=3 if commit else 2,
                    commit_offset=commit, suspend_ms=15000, subscription="*", sub_version=sub_version,
                    expression_type="TAG", timeout=5))
            return results, frames
        finally:
            await api.close()
            server.close()

    results, frames = asyncio.run(go())
    assert [(r.status, r.next_begin_offset) for r in results] == [(PullStatus.NO_NEW_MSG, 101 + k) for k in range(3)]
    assert len(frames) == 3
    for k, ((commit, sub_version), frame) in enumerate(zip(((0, 1), (77, 1), (78, 2)), frames, strict=True)):
        sent = decode_frame(frame[4:])
        fields = MQClientAPI._pull_fields("G", "T", 2, 100 + k, 32, 3 if commit else 2, commit, 15000, "*",
                                          sub_version, "TAG")
        if signed:
            assert sent.ext_fields["AccessKey"] == "ak" and "Signature" in sent.ext_fields
            expected = MQClientAPI("x", credentials=cred).signed(
                RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=fields))
        else:
            expected = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=fields)
        expected.opaque = sent.opaque
        assert frame == encode_frame(expected)


def test_pull_from_the_template_times_out_and_sees_the_connection_close():
    """A templated pull left unanswered: RemotingTimeoutError naming the address and PULL_MESSAGE within its
    timeout; one whose connection closes meanwhile: RemotingConnectError naming the address."""
    async def go():
        server, addr, _frames = await _broker(1)
        api = MQClientAPI(addr)
        kw = dict(group="G", topic="T", queue_id=0, max_nums=32, sys_flag=2, suspend_ms=15000, subscription="*",
                  sub_version=1, expression_type="TAG")
        try:
            await api.pull(addr, offset=0, timeout=5, **kw)   # connects
            t0 = time.monotonic()
            with pytest.raises(RemotingTimeoutError) as timed_out:
                await api.pull(addr, offset=1, timeout=0.5, **kw)
            took = time.monotonic() - t0
            with pytest.raises(RemotingConnectError) as closed:
                await api.pull(addr, offset=2, timeout=30, **kw)
            return timed_out.value, took, closed.value, addr
        finally:
            await api.close()
            server.close()

    timed_out, took, closed, addr = asyncio.run(go())
    assert took < 5
    assert addr in str(timed_out) and "PULL_MESSAGE" in str(timed_out) and timed_out.timeout_s == 0.5
    assert addr in str(closed)
