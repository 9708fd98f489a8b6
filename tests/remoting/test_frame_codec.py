"""Frame codec: both header encodings round-trip, hand-assembled frames decode, and no input raises
anything but FrameError (RemotingCommand.decode / NettyDecoder behaviour; docs/remoting-protocol.md)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstream.errors import FrameError
from rocketstream.remoting import LanguageCode, RemotingCommand, SerializeType, decode_frame, encode_frame
from rocketstream.remoting.command import MAX_FRAME_LENGTH, frame_body_length

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
languages = st.sampled_from(sorted(LanguageCode.names().values()))
int32 = st.integers(-2**31, 2**31 - 1)
int16 = st.integers(-2**15, 2**15 - 1)


@st.composite
def commands(draw, stype):
    small = stype == SerializeType.ROCKETMQ
    remark = draw(st.one_of(st.none(), text.filter(bool) if small else text))
    ext = draw(st.one_of(st.none(), st.dictionaries(text.filter(bool) if small else text, text, max_size=6)))
    if small and ext == {}:
        ext = None   # an empty extFields block decodes as absent in the binary header
    return RemotingCommand(
        code=draw(int16 if small else int32), language=draw(languages), version=draw(int16 if small else int32),
        opaque=draw(int32), flag=draw(int32), remark=remark, ext_fields=ext,
        body=draw(st.one_of(st.none(), st.binary(min_size=1, max_size=64))), serialize_type=stype)


def _roundtrip(cmd: RemotingCommand) -> RemotingCommand:
    frame = encode_frame(cmd)
    length = frame_body_length(frame[:4])
    assert length == len(frame) - 4
    assert frame[4] == cmd.serialize_type
    return decode_frame(frame[4:])


@given(commands(SerializeType.JSON))
def test_json_header_round_trip(cmd):
    assert _roundtrip(cmd) == cmd


@given(commands(SerializeType.ROCKETMQ))
def test_rocketmq_header_round_trip(cmd):
    assert _roundtrip(cmd) == cmd


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=300)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_frame_error(data):
    try:
        decode_frame(data)
    except FrameError:
        pass
    if len(data) >= 4:
        try:
            frame_body_length(data[:4])
        except FrameError:
            pass


@settings(max_examples=300)
@given(st.sampled_from([0, 1, 2, 255]), st.binary(max_size=120), st.binary(max_size=20))
def test_header_garbage_with_valid_prefix_raises_only_frame_error(stype, header, body):
    data = struct.pack(">I", (stype << 24) | len(header)) + header + body
    try:
        cmd = decode_frame(data)
    except FrameError:
        return
    assert cmd.body == (body or None)


@given(commands(SerializeType.ROCKETMQ), st.integers(0, 200))
def test_truncated_binary_header_is_a_frame_error_or_decodes(cmd, cut):
    frame = encode_frame(cmd)[4:]
    hlen = struct.unpack(">I", frame[:4])[0] & 0xFFFFFF
    short = struct.pack(">I", (1 << 24) | max(0, hlen - cut - 1)) + frame[4:4 + max(0, hlen - cut - 1)]
    try:
        decode_frame(short)
    except FrameError:
        pass


def test_worked_examples_from_the_spec():
    # rocketMQProtocolEncode: GET_ROUTEINFO_BY_TOPIC for TopicTest, opaque 1, version 409, 49 bytes
    binary = bytes.fromhex("0000002d01000029" "0069" "00" "0199" "00000001" "00000000" "00000000" "00000014"
                           "0005746f706963" "00000009546f70696354657374")
    assert len(binary) == 49
    cmd = decode_frame(binary[4:])
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (105, "JAVA", 409, 1, 0)
    assert cmd.ext_fields == {"topic": "TopicTest"} and cmd.remark is None and cmd.body is None
    assert encode_frame(cmd) == binary
    header = (b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":1,'
              b'"serializeTypeCurrentRPC":"JSON","version":409}')
    frame = struct.pack(">iI", 4 + len(header), len(header)) + header
    assert len(frame) == 139
    cmd = decode_frame(frame[4:])
    assert (cmd.code, cmd.ext_fields, cmd.serialize_type) == (105, {"topic": "TopicTest"}, SerializeType.JSON)
    assert encode_frame(cmd) == frame   # our JSON header is byte-identical to Java's


@pytest.mark.parametrize("length", [-1, 0, 3, MAX_FRAME_LENGTH - 3, 2**31 - 1])
def test_bad_frame_lengths(length):
    with pytest.raises(FrameError, match="frame"):
        frame_body_length(struct.pack(">i", length), addr="1.2.3.4:5")


def test_frame_limit_counts_the_length_field():
    assert frame_body_length(struct.pack(">i", MAX_FRAME_LENGTH - 4)) == MAX_FRAME_LENGTH - 4
    with pytest.raises(FrameError, match="exceeds"):
        encode_frame(RemotingCommand(code=1, body=b"x" * MAX_FRAME_LENGTH))


def test_json_header_leniency():
    # keys in any order, missing optional keys, non-string extFields values (fastjson reads them as strings)
    header = b'{"opaque":7,"code":34,"extFields":{"a":1,"b":true,"c":null}}'
    cmd = decode_frame(struct.pack(">I", len(header)) + header)
    assert (cmd.code, cmd.opaque, cmd.language, cmd.version, cmd.flag) == (34, 7, "JAVA", 0, 0)
    assert cmd.ext_fields == {"a": "1", "b": "true"}


@pytest.mark.parametrize("header", [b"[]", b"{}", b'{"code":"x"}', b'{"code":1,"extFields":[]}', b"\xff", b"{"])
def test_bad_json_headers(header):
    with pytest.raises(FrameError):
        decode_frame(struct.pack(">I", len(header)) + header)


def test_unknown_serialize_type():
    with pytest.raises(FrameError, match="serialize type 2"):
        decode_frame(struct.pack(">I", 2 << 24))


def test_long_field_takes_java_longs_and_names_the_field_otherwise():
    from rocketstream.errors import HeaderFieldError
    from rocketstream.remoting import RemotingCommand

    cmd = RemotingCommand(code=37, ext_fields={"a": str(2**63 - 1), "b": str(-(2**63)), "c": str(2**63),
                                               "d": "12x"})
    assert cmd.long_field("a") == 2**63 - 1 and cmd.long_field("b") == -(2**63)
    for name, what in (("c", "int64"), ("d", "number"), ("e", "")):
        with pytest.raises(HeaderFieldError, match=name) as info:
            cmd.long_field(name)
        assert what in str(info.value)


def test_a_commands_repr_never_shows_a_security_token():
    from rocketstream.remoting.acl_signing import SECURITY_TOKEN

    cmd = RemotingCommand(code=10, ext_fields={"AccessKey": "ak", SECURITY_TOKEN: "sts-secret-token", "topic": "T"})
    text = repr(cmd)
    assert "sts-secret-token" not in text and "'topic': 'T'" in text and "'AccessKey': 'ak'" in text
    assert cmd.ext_fields[SECURITY_TOKEN] == "sts-secret-token"   # the command itself is unchanged
