"""Columnar batch put (``MessageStore.put_batch``) against ``put_messages``: the same commit-log
and consume-queue bytes, the same results, the same refusals; and the store's one CRC32."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from rocketstream.store import format as fmt


@pytest.mark.parametrize("size", [0, 1, 7, 255, 256, 4096, 70_000])
def test_crc32_is_zlibs_crc32_for_every_buffer_kind(size):
    data = os.urandom(size)
    arr = np.frombuffer(data, dtype=np.uint8)
    assert fmt.crc32(data) == zlib.crc32(data)
    assert fmt.crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])
    assert fmt.crc32(arr[size // 3:]) == zlib.crc32(data[size // 3:])
    assert fmt.masked_crc32(data) == zlib.crc32(data) & 0x7FFFFFFF


def test_crc32_falls_back_to_zlib_without_isal():
    code = ("import sys, zlib; sys.modules['isal'] = None; sys.modules['isal.isal_zlib'] = None\n"
            "from rocketstream.store import format as fmt\n"
            "assert fmt.crc32 is zlib.crc32, fmt.crc32\n"
            "assert fmt.masked_crc32(b'hi') == 1486039724\n")
    subprocess.run([sys.executable, "-c", code], check=True)
