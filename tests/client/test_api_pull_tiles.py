"""MQClientAPI.pull_tiles (several PULL_MESSAGE of one queue sent at once, one timer and one future for all):
the same answers as one pull each, against our broker and the real 4.9.8 broker; a pull left unanswered is
a RemotingTimeoutError naming the address, one whose connection closed a RemotingConnectError, and the
answered ones of the same call still come."""

from __future__ import annotations

import asyncio
import time

import pytest

from rocketstream.client.api import MQClientAPI, build_pull_sys_flag
from rocketstream.client.common import PullStatus
from rocketstream.errors import BrokerResponseError, HeaderFieldError, RemotingConnectError, RemotingTimeoutError
from rocketstream.remoting import RemotingCommand, ResponseCode, decode_frame, encode_frame
from tests.client.test_api import _await_dispatched, _send, run, uniq

FLAGS = build_pull_sys_flag(False, False, True)


def test_tiles_answer_as_single_pulls(mq_broker):
    topic = uniq("CapiTiles")

    async def go():
        api = MQClientAPI(mq_broker.namesrv_addr)
        signed = MQClientAPI(mq_broker.namesrv_addr)
        signed.credentials = object()   # type: ignore[assignment]   # no template: each request encoded
        signed.signed = lambda request: request   # type: ignore[method-assign]
        try:
            bd, _ = await _send(api, topic, [b"m-%d" % i for i in range(40)])
            addr = bd.master_addr()
            await _await_dispatched(api, addr, topic, 0, 40)
            tiles = [(0, 10), (10, 10), (20, 7), (35, 32), (40, 5), (1000, 3)]
            singles = [await api.pull(addr, group="capi_cg", topic=topic, queue_id=0, offset=o, max_nums=n,
                                      sys_flag=FLAGS, subscription="*", timeout=5) for o, n in tiles]
            got = await api.pull_tiles(addr, group="capi_cg", topic=topic, queue_id=0, tiles=tiles,
                                       sys_flag=FLAGS, subscription="*", timeout=5)
            got_signed = await signed.pull_tiles(addr, group="capi_cg", topic=topic, queue_id=0, tiles=tiles,
                                                 sys_flag=FLAGS, subscription="*", timeout=5)
            return singles, got, got_signed
        finally:
            await api.close()
            await signed.close()

    singles, got, got_signed = run(go())
    assert [r.status for r in singles] == [PullStatus.FOUND] * 4 + [PullStatus.NO_NEW_MSG, PullStatus.OFFSET_ILLEGAL]
    for answers in (got, got_signed):
        assert [(r.status, r.next_begin_offset, r.min_offset, r.max_offset, r.suggest_which_broker_id, r.body)
                for r in answers] == \
               [(r.status, r.next_begin_offset, r.min_offset, r.max_offset, r.suggest_which_broker_id, r.body)
                for r in singles]   # type: ignore[union-attr]


async def _answer_first(close_after: bool):
    """A peer answering the first request of a connection with PULL_NOT_FOUND, then silent (or closing)."""
    async def handle(reader, writer):
        try:
            length = int.from_bytes(await reader.readexactly(4), "big")
            request = decode_frame(await reader.readexactly(length))
            writer.write(encode_frame(request.response(ResponseCode.PULL_NOT_FOUND, fields={
                "nextBeginOffset": 5, "minOffset": 0, "maxOffset": 5, "suggestWhichBrokerId": 0})))
            await writer.drain()
            if not close_after:
                await asyncio.sleep(5)
        finally:
            writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.mark.parametrize("close_after", [False, True])
def test_unanswered_tiles_are_errors_naming_the_address(close_after):
    async def go():
        server, addr = await _answer_first(close_after)
        api = MQClientAPI(addr)
        try:
            t0 = time.monotonic()
            got = await api.pull_tiles(addr, group="g", topic="T", queue_id=0, tiles=[(5, 32), (37, 32), (69, 32)],
                                       sys_flag=FLAGS, subscription="*", timeout=1.0)
            return got, time.monotonic() - t0, addr
        finally:
            await api.close()
            server.close()

    got, took, addr = run(go())
    first, *rest = got
    assert first.status is PullStatus.NO_NEW_MSG and first.next_begin_offset == 5   # type: ignore[union-attr]
    kind = RemotingConnectError if close_after else RemotingTimeoutError
    assert [type(e) for e in rest] == [kind, kind]
    assert all(addr in str(e) for e in rest)
    assert took < 1.9 if not close_after else took < 0.9


def test_an_error_code_raises_naming_the_pull():
    async def handle(reader, writer):
        length = int.from_bytes(await reader.readexactly(4), "big")
        request = decode_frame(await reader.readexactly(length))
        writer.write(encode_frame(RemotingCommand(code=ResponseCode.SUBSCRIPTION_NOT_EXIST, opaque=request.opaque,
                                                  flag=1, remark="no subscription")))
        await writer.drain()
        await asyncio.sleep(2)
        writer.close()

    async def go():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        api = MQClientAPI(addr)
        try:
            with pytest.raises(BrokerResponseError, match=r"pull T:2@7 for g") as ei:
                await api.pull_tiles(addr, group="g", topic="T", queue_id=2, tiles=[(7, 1)], sys_flag=FLAGS,
                                     subscription="*", timeout=3)
            return ei.value
        finally:
            await api.close()
            server.close()

    assert run(go()).code == ResponseCode.SUBSCRIPTION_NOT_EXIST


@pytest.mark.parametrize("fields,problem", [
    ({"minOffset": "0", "maxOffset": "5", "suggestWhichBrokerId": "0"}, "nextBeginOffset.*is null"),
    ({"nextBeginOffset": "5x", "minOffset": "0", "maxOffset": "5", "suggestWhichBrokerId": "0"},
     "nextBeginOffset.*not a number"),
    (None, "nextBeginOffset.*is null"),
])
def test_a_bad_answer_header_names_the_field_and_address(fields, problem):
    async def handle(reader, writer):
        for _ in range(2):
            length = int.from_bytes(await reader.readexactly(4), "big")
            request = decode_frame(await reader.readexactly(length))
            writer.write(encode_frame(RemotingCommand(code=ResponseCode.PULL_NOT_FOUND, opaque=request.opaque, flag=1,
                                                      ext_fields=fields)))
            await writer.drain()
        await asyncio.sleep(2)
        writer.close()

    async def go():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        api = MQClientAPI(addr)
        try:
            errors = []
            for call in (api.pull_tiles(addr, group="g", topic="T", queue_id=2, tiles=[(7, 1)], sys_flag=FLAGS,
                                        subscription="*", timeout=3),
                         api.pull(addr, group="g", topic="T", queue_id=2, offset=7, max_nums=1, sys_flag=FLAGS,
                                  subscription="*", timeout=3)):
                with pytest.raises(HeaderFieldError, match=problem) as ei:
                    await call
                errors.append(ei.value)
            return errors, addr
        finally:
            await api.close()
            server.close()

    errors, addr = run(go())
    assert all(addr in str(e) for e in errors)
