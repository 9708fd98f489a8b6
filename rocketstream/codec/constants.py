"""Numbers of RocketMQ's store format: record magic codes, SYSFLAG bits, property names, field
positions, the consume-queue unit, and the big-endian structs every layer packs with
(``MessageDecoder``, ``MessageSysFlag``, ``MessageConst`` in RocketMQ; drawn in docs/store-format.md)."""

from __future__ import annotations

import struct

import numpy as np

__all__ = [
    "BLANK_MAGIC",
    "COMPRESSION_LZ4",
    "COMPRESSION_TYPE_MASK",
    "COMPRESSION_ZLIB",
    "COMPRESSION_ZSTD",
    "CQ_DTYPE",
    "CQ_UNIT",
    "CQ_UNIT_SIZE",
    "DELAY_LEVELS_MS",
    "END_FILE_MIN_BLANK_LENGTH",
    "EXT_ADDRESS_MAX",
    "FLAG_BORNHOST_V6",
    "FLAG_COMPRESSED",
    "FLAG_MULTI_TAGS",
    "FLAG_STOREHOST_V6",
    "HEADER_V4",
    "HEADER_V4_DTYPE",
    "HEADER_V4_FIELDS",
    "HEADER_V4_SIZE",
    "INT16",
    "INT32",
    "INT32_PAIR",
    "INT64",
    "INT8",
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_PROPERTIES_LENGTH",
    "MAX_TOPIC_LENGTH_V1",
    "POS_BODY_CRC",
    "POS_BORN_HOST",
    "POS_BORN_TIMESTAMP",
    "POS_FLAG",
    "POS_MAGIC",
    "POS_PHYSICAL_OFFSET",
    "POS_QUEUE_ID",
    "POS_QUEUE_OFFSET",
    "POS_STORE_TIMESTAMP",
    "POS_SYS_FLAG",
    "POS_TOTAL_SIZE",
    "PROPERTY_DELAY",
    "PROPERTY_KEYS",
    "PROPERTY_REAL_QID",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_PRODUCER_GROUP",
    "PROPERTY_CLUSTER",
    "PROPERTY_TAGS",
    "PROPERTY_TRAN_MSG",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT",
    "RECORD_HEAD",
    "SCHEDULE_TOPIC",
    "TRANSACTION_COMMIT",
    "TRANSACTION_MASK",
    "TRANSACTION_NOT_TYPE",
    "TRANSACTION_PREPARED",
    "TRANSACTION_ROLLBACK",
]

MAGIC_V1 = -626843481
MAGIC_V2 = -626843477
BLANK_MAGIC = -875286124
END_FILE_MIN_BLANK_LENGTH = 8
CQ_UNIT_SIZE = 20
MAX_PROPERTIES_LENGTH = 32767
MAX_TOPIC_LENGTH_V1 = 127
# ConsumeQueueExt.isExtAddr: a CQ unit's tagsCode <= Integer.MIN_VALUE - 1 is an address into
# consumequeue_ext/ (realOffset + Long.MIN_VALUE), not a tags code (docs/store-format.md, ConsumeQueueExt).
EXT_ADDRESS_MAX = -(2**31) - 1

FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_LZ4 = 1
COMPRESSION_ZSTD = 2
COMPRESSION_ZLIB = 3

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRAN_MSG = "TRAN_MSG"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# messageDelayLevel default "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"; index = level - 1.
DELAY_LEVELS_MS: tuple[int, ...] = (
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
    420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
)

# --- the record header: described once --------------------------------------------------------
# A record's fields from TOTALSIZE to BODY length when both hosts are IPv4, in order, with their struct
# codes (CommitLog.DefaultAppendMessageCallback.doAppend writes them; record.py and
# spec/rocketmq-store-format.md draw the layout). An IPv6 host is 16 address bytes instead of 4, shifting
# every later field by 12. The client's per-record struct (HEADER_V4) and the batch decoder's numpy dtype
# (HEADER_V4_DTYPE) are both derived from this one list, and so are the field positions below.
HEADER_V4_FIELDS: tuple[tuple[str, str], ...] = (
    ("total_size", "i"), ("magic", "i"), ("body_crc", "i"), ("queue_id", "i"), ("flag", "i"),
    ("queue_offset", "q"), ("physical_offset", "q"), ("sys_flag", "i"), ("born_timestamp", "q"),
    ("born_ip", "I"), ("born_port", "i"), ("store_timestamp", "q"), ("store_ip", "I"), ("store_port", "i"),
    ("reconsume_times", "i"), ("prepared_transaction_offset", "q"), ("body_len", "i"),
)
HEADER_V4 = struct.Struct(">" + "".join(code for _, code in HEADER_V4_FIELDS))
HEADER_V4_DTYPE = np.dtype([(name, ">" + code) for name, code in HEADER_V4_FIELDS])
HEADER_V4_SIZE = HEADER_V4.size   # 88
# TOTALSIZE .. BORNTIMESTAMP: the fields before the first host, the same for every host kind
_HOST_INDEPENDENT = 9


def _pos(name: str) -> int:
    """Where field ``name`` starts: the size of the fields before it."""
    names = [field for field, _ in HEADER_V4_FIELDS]
    return struct.calcsize(">" + "".join(code for _, code in HEADER_V4_FIELDS[:names.index(name)]))


# Field positions, for readers that peek at a record without decoding it: those before BORNHOST hold for
# every record; POS_STORE_TIMESTAMP holds when BORNHOST is IPv4 (add 12 when SYSFLAG has FLAG_BORNHOST_V6).
POS_TOTAL_SIZE, POS_MAGIC, POS_BODY_CRC, POS_QUEUE_ID, POS_FLAG = (        # 0, 4, 8, 12, 16
    _pos("total_size"), _pos("magic"), _pos("body_crc"), _pos("queue_id"), _pos("flag"))
POS_QUEUE_OFFSET, POS_PHYSICAL_OFFSET, POS_SYS_FLAG, POS_BORN_TIMESTAMP = (  # 20, 28, 36, 40
    _pos("queue_offset"), _pos("physical_offset"), _pos("sys_flag"), _pos("born_timestamp"))
POS_BORN_HOST = _pos("born_ip")                   # 48
POS_STORE_TIMESTAMP = _pos("store_timestamp")     # 56

CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])

# --- big-endian structs shared by the codec and the store files -------------------------------
INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
INT32_PAIR = struct.Struct(">ii")      # TOTALSIZE, MAGICCODE: what every record starts with
CQ_UNIT = struct.Struct(">qiq")        # commitLogOffset, size, tagsCode
RECORD_HEAD = struct.Struct(">" + "".join(code for _, code in HEADER_V4_FIELDS[:_HOST_INDEPENDENT]))  # ..BORNTIMESTAMP
