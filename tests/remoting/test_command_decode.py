"""decode_frame's JSON header read by json's scanner alone (remoting/command.py ``_decode_json_header``): a
header with whitespace around its object decodes as json.loads decodes it, and anything after the object,
or no object, is a FrameError as before."""

from __future__ import annotations

import struct

import pytest

from rocketstream.errors import FrameError
from rocketstream.remoting import decode_frame


def _frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">I", len(header)) + header + body


@pytest.mark.parametrize("header", [
    b'{"code":11,"extFields":{"a":"1"},"flag":1,"language":"JAVA","opaque":5,"version":409}',
    b' \n{"code":11,"extFields":{"a":"1"},"flag":1,"language":"JAVA","opaque":5,"version":409}\t ',
    b'{ "code" : 11 , "extFields" : { "a" : "1" } , "flag" : 1 , "language" : "JAVA" , "opaque" : 5 , '
    b'"version" : 409 }',
])
def test_whitespace_around_and_inside_the_header(header):
    cmd = decode_frame(_frame(header, b"body"))
    assert (cmd.code, cmd.ext_fields, cmd.flag, cmd.language, cmd.opaque, cmd.version, cmd.body) == \
           (11, {"a": "1"}, 1, "JAVA", 5, 409, b"body")


@pytest.mark.parametrize("header", [
    b'{"code":11}x', b'{"code":11}{"code":12}', b'', b'  ', b'{"code":11', b'x{"code":11}', b'\xff{"code":1}',
    b'[' * 100_000,
])
def test_anything_but_one_object_is_a_frame_error(header):
    with pytest.raises(FrameError, match="JSON header does not parse"):
        decode_frame(_frame(header))
