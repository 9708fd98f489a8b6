"""The vectorized pull-body decoder gives exactly what the per-record decoder gives, and the same errors."""

from __future__ import annotations

import pytest

from rocketstream.client.api import decode_messages, process_pull_result
from rocketstream.client.common import PullResult, PullStatus
from rocketstream.client.pull_decode import VECTORIZE_MIN_RECORDS, decode_pull_body, process_pull_result_fast
from rocketstream.client.subscription import SubscriptionData
from rocketstream.codec import FLAG_BORNHOST_V6, FLAG_STOREHOST_V6, compress_body, encode_record
from rocketstream.errors import BodyError


def body_of(n: int, *, v6_every: int = 0, compress_every: int = 0, topic: str = "T") -> bytes:
    out, pos = [], 0
    for i in range(n):
        data, sys_flag = (f"body-{i}-" * (i % 7 + 1)).encode(), 0
        if compress_every and i % compress_every == 0:
            data, bits = compress_body(data * 50)
            sys_flag |= bits
        v6 = bool(v6_every) and i % v6_every == 0
        if v6:
            sys_flag |= FLAG_BORNHOST_V6 | FLAG_STOREHOST_V6
        props = {"TAGS": "A" if i % 2 else "B", "KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}", "ü": "ß"}
        rec = encode_record(topic=topic if i % 5 else topic + "x", queue_id=i % 4, body=data, properties=props,
                            queue_offset=i, physical_offset=pos, sys_flag=sys_flag, born_timestamp=1000 + i,
                            born_host=("::1" if v6 else "10.0.0.1", 5000 + i), store_timestamp=2000 + i,
                            store_host=("fe80::2" if v6 else "127.0.0.1", 10911), reconsume_times=i % 3,
                            prepared_transaction_offset=0)
        out.append(rec)
        pos += len(rec)
    return b"".join(out)


@pytest.mark.parametrize("n", [1, VECTORIZE_MIN_RECORDS - 1, VECTORIZE_MIN_RECORDS, 100])
@pytest.mark.parametrize(("v6", "comp"), [(0, 0), (3, 0), (0, 4), (2, 3)])
def test_same_messages_as_the_per_record_decoder(n: int, v6: int, comp: int) -> None:
    body = body_of(n, v6_every=v6, compress_every=comp)
    assert decode_pull_body(body, broker_name="b") == decode_messages(body, broker_name="b")


def test_process_pull_result_fast_matches_api() -> None:
    body = body_of(64)
    tags = SubscriptionData.parse("A")
    a = process_pull_result(PullResult(PullStatus.FOUND, 64, 0, 64, 0, body), "b", tags)
    b = process_pull_result_fast(PullResult(PullStatus.FOUND, 64, 0, 64, 0, body), "b", tags)
    assert a == b and len(b) == 32 and {m.tags for m in b} == {"A"}
    assert b[0].properties["MIN_OFFSET"] == "0" and b[0].properties["MAX_OFFSET"] == "64"


@pytest.mark.parametrize("n", [4, 64])
def test_bad_bodies_raise_body_error_naming_the_position(n: int) -> None:
    body = bytearray(body_of(n))
    first = int.from_bytes(body[0:4], "big")
    body[first + 4:first + 8] = b"\x00\x00\x00\x01"   # second record's magic
    with pytest.raises(BodyError, match=f"byte {first}"):
        decode_pull_body(bytes(body), addr="127.0.0.1:1")
    with pytest.raises(BodyError, match="beyond the body|truncated"):
        decode_pull_body(body_of(n)[:-3])
