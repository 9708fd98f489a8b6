"""RequestTemplate (remoting/command.py): the frames it makes are encode_frame's, byte for byte, for any
names and values, and it declines what it cannot make (a binary header, a body, a missing field)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstream.remoting import RemotingCommand, SerializeType, encode_frame
from rocketstream.remoting.codes import RequestCode
from rocketstream.remoting.command import RequestTemplate

NAMES = ("queueOffset", "maxMsgNums")
text = st.text(max_size=30)   # lone surrogates, NUL, quotes, '%' and non-ASCII included


def _pull(group: str = "g", topic: str = "T", subscription: str = "*", **kw) -> RemotingCommand:
    fields = {"consumerGroup": group, "topic": topic, "queueId": "3", "queueOffset": "0", "maxMsgNums": "0",
              "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": subscription,
              "subVersion": "0", "expressionType": "TAG"}
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=fields, **kw)


@settings(max_examples=80, deadline=None)
@given(group=text, topic=text, subscription=text, offset=st.integers(-2**63, 2**63 - 1),
       nums=st.integers(-2**31, 2**31 - 1), opaque=st.integers(-2**31, 2**31 - 1))
def test_frames_are_encode_frames(group, topic, subscription, offset, nums, opaque):
    template = RequestTemplate.make(_pull(group, topic, subscription), NAMES)
    cmd = _pull(group, topic, subscription, opaque=opaque)
    assert cmd.ext_fields is not None
    cmd.ext_fields.update(queueOffset=str(offset), maxMsgNums=str(nums))
    if template is None:   # declined only for names holding a marker as written (a NUL escape, the opaque's)
        assert any("\0" in s or "-2147475729" in s for s in (group, topic, subscription))
        return
    assert template.frame(opaque, offset, nums) == encode_frame(cmd)


def test_markers_in_names_do_not_fool_it():
    for group in ("\x000\x00", "\x001\x00", ":-2147475729,", "%d", '"%d"'):
        template = RequestTemplate.make(_pull(group), NAMES)
        cmd = _pull(group, opaque=9)
        assert cmd.ext_fields is not None
        cmd.ext_fields.update(queueOffset="77", maxMsgNums="32")
        assert template is None or template.frame(9, 77, 32) == encode_frame(cmd)


@pytest.mark.parametrize("cmd,names", [
    (_pull(serialize_type=SerializeType.ROCKETMQ), NAMES),   # value lengths are in a binary header
    (_pull(body=b"x"), NAMES),
    (_pull(), ("queueOffset", "noSuchField")),
    (_pull(), ("maxMsgNums", "queueOffset")),                # not in header order
    (_pull(), ()),
    (RemotingCommand(code=RequestCode.PULL_MESSAGE), NAMES),
])
def test_declines_what_it_cannot_make(cmd, names):
    assert RequestTemplate.make(cmd, names) is None
