"""Narrower user schemas: which store columns are read, and the Arrow schema Spark expects."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from rocketstream.errors import OptionError
from rocketstream.spark.schema import SCHEMA_DDL, projection_for
from rocketstream.store import FIELD_NAMES, MESSAGE_SCHEMA


def test_full_schema(spark):
    p = projection_for(None)
    assert p.is_full and p.arrow_schema == MESSAGE_SCHEMA
    assert SCHEMA_DDL.startswith("`topic` STRING NOT NULL")
    assert projection_for(StructType.fromDDL(SCHEMA_DDL)).columns == FIELD_NAMES


def test_narrow_schema_reads_only_those_columns_in_user_order_and_names(spark):
    p = projection_for(StructType.fromDDL("QUEUEOFFSET BIGINT, topic STRING, properties MAP<STRING,STRING>"))
    assert p.columns == ("queueOffset", "topic", "properties")
    assert p.arrow_schema.names == ["QUEUEOFFSET", "topic", "properties"]
    assert all(f.nullable for f in p.arrow_schema)
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1], pa.int64()), pa.array(["T"]), pa.array([[("a", "b")]], pa.map_(pa.string(), pa.string()))],
        schema=pa.schema([MESSAGE_SCHEMA.field(c) for c in p.columns]),
    )
    assert p.relabel(batch).schema == p.arrow_schema


@pytest.mark.parametrize("ddl,fragment", [
    ("nope STRING", "not a message column"),
    ("queueId BIGINT", "must be int"),
    ("body STRING", "must be binary"),
    ("tags STRING NOT NULL", "can be null"),
    ("topic STRING, TOPIC STRING", "twice"),
])
def test_bad_user_schema(spark, ddl, fragment):
    with pytest.raises(OptionError, match=fragment):
        projection_for(StructType.fromDDL(ddl))
