"""The Arrow schema of a message row, shared by the bulk reader and the Spark source.

PySpark's Python data source compares the first Arrow batch a reader yields with the Arrow form of
the Spark schema *exactly*: field order, types (``binary`` not ``large_binary``, ``timestamp[us,
tz="UTC"]`` with the literal zone name), nullability, and the map's nullable values. So the schema
is written out here once, and the Spark DDL string is derived from it rather than kept by hand.

Field names are RocketMQ ``MessageExt`` names in camelCase. ``tags`` and ``keys`` are null when the
message has none; every other field is non-null.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from rocketstream.errors import OptionError

TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())  # key non-null, value nullable (Spark's layout)

MESSAGE_FIELDS: tuple[pa.Field, ...] = (
    pa.field("topic", pa.string(), nullable=False),
    pa.field("brokerName", pa.string(), nullable=False),
    pa.field("queueId", pa.int32(), nullable=False),
    pa.field("queueOffset", pa.int64(), nullable=False),
    pa.field("commitLogOffset", pa.int64(), nullable=False),
    pa.field("storeSize", pa.int32(), nullable=False),
    pa.field("msgId", pa.string(), nullable=False),
    pa.field("offsetMsgId", pa.string(), nullable=False),
    pa.field("tags", pa.string(), nullable=True),
    pa.field("keys", pa.string(), nullable=True),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("properties", PROPERTIES_TYPE, nullable=False),
    pa.field("bornTimestamp", TIMESTAMP_UTC, nullable=False),
    pa.field("bornHost", pa.string(), nullable=False),
    pa.field("storeTimestamp", TIMESTAMP_UTC, nullable=False),
    pa.field("storeHost", pa.string(), nullable=False),
    pa.field("sysFlag", pa.int32(), nullable=False),
    pa.field("bodyCRC", pa.int32(), nullable=False),
    pa.field("reconsumeTimes", pa.int32(), nullable=False),
    pa.field("flag", pa.int32(), nullable=False),
    pa.field("preparedTransactionOffset", pa.int64(), nullable=False),
)

MESSAGE_SCHEMA: pa.Schema = pa.schema(list(MESSAGE_FIELDS))
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in MESSAGE_FIELDS)


def project_schema(columns: Sequence[str] | None) -> pa.Schema:
    """The sub-schema holding ``columns`` in the order given (all fields when ``None``).

    Raises ``OptionError`` (a ValueError) naming the unknown or repeated column, with the valid names.
    """
    if columns is None:
        return MESSAGE_SCHEMA
    seen: set[str] = set()
    fields = []
    for name in columns:
        if name not in FIELD_NAMES:
            raise OptionError("columns", f"unknown message column {name!r}; valid columns: {', '.join(FIELD_NAMES)}")
        if name in seen:
            raise OptionError("columns", f"message column {name!r} requested twice")
        seen.add(name)
        fields.append(MESSAGE_SCHEMA.field(name))
    return pa.schema(fields)


_DDL_TYPES = {
    pa.string(): "STRING",
    pa.binary(): "BINARY",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    TIMESTAMP_UTC: "TIMESTAMP",
    PROPERTIES_TYPE: "MAP<STRING, STRING>",
}


def spark_ddl(schema: pa.Schema = MESSAGE_SCHEMA) -> str:
    """Spark DDL for ``schema`` (``MESSAGE_SCHEMA`` or a projection of it), with ``NOT NULL`` marks.

    Spark turns this back into exactly the Arrow schema above: ``TIMESTAMP`` becomes
    ``timestamp[us, tz=UTC]`` and ``MAP<STRING, STRING>`` has nullable values.
    """
    parts = []
    for f in schema:
        try:
            ddl_type = _DDL_TYPES[f.type]
        except KeyError:
            raise OptionError("schema", f"column {f.name!r} has type {f.type} with no Spark DDL mapping") from None
        parts.append(f"`{f.name}` {ddl_type}" + ("" if f.nullable else " NOT NULL"))
    return ", ".join(parts)
