"""The Spark schema of the ``rocketmq`` source, and how a user-supplied narrower schema is honoured.

PySpark 4.3 does no column pruning for Python sources, so a ``.schema("topic STRING, queueOffset
BIGINT")`` given by the user is the only way to keep the executor from decoding bodies: the reader
asks the store for exactly those columns. Spark checks the first Arrow batch against the Arrow form of
the user's schema *exactly* (names, order, nullability), so batches are relabelled to that schema.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from rocketstream.codec.arrow_records import FIELD_NAMES, MESSAGE_SCHEMA, spark_ddl
from rocketstream.errors import OptionError

SCHEMA_DDL: str = spark_ddl(MESSAGE_SCHEMA)

_SPARK_TYPES: dict[pa.DataType, DataType] = {
    pa.string(): StringType(),
    pa.binary(): BinaryType(),
    pa.int32(): IntegerType(),
    pa.int64(): LongType(),
    pa.timestamp("us", tz="UTC"): TimestampType(),
    pa.map_(pa.string(), pa.string()): MapType(StringType(), StringType(), True),
}
_BY_LOWER = {name.lower(): name for name in FIELD_NAMES}


@dataclass(frozen=True)
class Projection:
    """The store columns to read (in output order) and the Arrow schema Spark expects for them."""

    columns: tuple[str, ...]
    arrow_schema: pa.Schema

    @property
    def is_full(self) -> bool:
        return self.columns == FIELD_NAMES

    def relabel(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (store names, store nullability) under Spark's names and nullability."""
        if batch.schema.equals(self.arrow_schema):
            return batch
        return pa.RecordBatch.from_arrays(batch.columns, schema=self.arrow_schema)


def projection_for(schema: StructType | None) -> Projection:
    """Columns and Arrow schema for the schema Spark passes to ``reader(schema)``.

    Every field must be a message column (matched case-insensitively, as Spark resolves names) with
    the column's Spark type; a field declared NOT NULL must be non-null in the store (``tags`` and
    ``keys`` are nullable). Anything else is an OptionError on ``schema`` naming the field.
    """
    if schema is None:
        return Projection(FIELD_NAMES, MESSAGE_SCHEMA)
    columns: list[str] = []
    fields: list[pa.Field] = []
    for f in schema.fields:
        name = _BY_LOWER.get(f.name.lower())
        if name is None:
            raise OptionError("schema", f"field {f.name!r} is not a message column; valid: {', '.join(FIELD_NAMES)}")
        if name in columns:
            raise OptionError("schema", f"field {f.name!r} appears twice")
        store_field = MESSAGE_SCHEMA.field(name)
        want = _SPARK_TYPES[store_field.type]
        got = f.dataType
        if isinstance(want, MapType):
            same = isinstance(got, MapType) and got.keyType == want.keyType and got.valueType == want.valueType
        else:
            same = got == want
        if not same:
            raise OptionError("schema", f"field {f.name!r} must be {want.simpleString()}", got.simpleString())
        if not f.nullable and store_field.nullable:
            raise OptionError("schema", f"field {f.name!r} can be null (message without {name}); drop NOT NULL")
        arrow_type = store_field.type
        if isinstance(got, MapType) and not got.valueContainsNull:
            arrow_type = pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False))
        columns.append(name)
        fields.append(pa.field(f.name, arrow_type, nullable=f.nullable))
    return Projection(tuple(columns), pa.schema(fields))
