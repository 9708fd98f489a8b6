"""The lowest layer: RocketMQ's bytes, pure and shared by store, broker and client.

``record`` (commit-log records with the one record validator ``check_record``, blank records, CQ
units, client batch bodies), ``constants`` (with the one record header layout, ``HEADER_V4_FIELDS``),
``properties``, ``ids`` (hosts, offset message ids, UNIQ_KEY), ``compression``, ``tags`` (Java string
hash, tags codes, delay levels), ``fastjson`` (the offset files' JSON dialect) and ``arrow_records``
(records to Arrow batches for every reader: the message schema, the vectorized header decode and
``record_problems``, the validator's numpy twin, the column builder and the pull-body decoder —
imported on its own, so ``import rocketstream.codec`` loads no pyarrow). Nothing here does I/O or
imports another part of rocketstream (only ``rocketstream.errors``, which imports nothing of ours).
"""

from rocketstream.codec.compression import compress_body, decompress_body
from rocketstream.codec.constants import *  # noqa: F403 - the format's numbers are the package's API
from rocketstream.codec.constants import __all__ as _constant_names
from rocketstream.codec.ids import (
                                    HostAddress,
                                    decode_offset_msg_id,
                                    new_uniq_key,
                                    new_uniq_key_block,
                                    offset_msg_id,
                                    offset_msg_ids,
)
from rocketstream.codec.properties import (
                                    decode_java_utf8,
                                    decode_properties,
                                    encode_properties,
                                    java_utf8_bytes,
)
from rocketstream.codec.record import (
                                    RECORD_CHECKS,
                                    BatchEntry,
                                    MessageRecord,
                                    RecordLayout,
                                    RecordProblem,
                                    body_crc_problem,
                                    check_record,
                                    crc32,
                                    decode_batch_body,
                                    decode_record,
                                    encode_batch_body,
                                    encode_blank,
                                    encode_cq_unit,
                                    encode_record,
                                    masked_crc32,
                                    record_size,
)
from rocketstream.codec.tags import (
                                    cq_tags_code,
                                    is_ext_address,
                                    java_hash,
                                    parse_delay_levels,
                                    tags_code,
)

__all__ = [*_constant_names, "RECORD_CHECKS", "BatchEntry", "HostAddress", "MessageRecord", "RecordLayout",
           "RecordProblem", "body_crc_problem", "check_record", "compress_body", "cq_tags_code", "crc32",
           "decode_batch_body", "decode_java_utf8", "decode_offset_msg_id", "decode_properties", "decode_record",
           "decompress_body", "encode_batch_body", "encode_blank", "encode_cq_unit", "encode_properties",
           "encode_record", "is_ext_address", "java_hash", "java_utf8_bytes", "masked_crc32", "new_uniq_key",
           "new_uniq_key_block", "offset_msg_id", "offset_msg_ids", "parse_delay_levels", "record_size",
           "tags_code"]
