"""The ``rocketmq`` Python data source: options in, batch or stream reader out."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from rocketstream.spark.batch import batch_reader
from rocketstream.spark.options import parse_options
from rocketstream.spark.schema import SCHEMA_DDL, projection_for
from rocketstream.spark.sink import sink_writer
from rocketstream.spark.stream import RocketMQStreamReader

FORMAT_NAME = "rocketmq"


class RocketMQDataSource(DataSource):
    """``spark.read.format("rocketmq").option("topic", "T").load("<store root>")``, and ``readStream``;
    ``df.write`` / ``df.writeStream`` with ``format("rocketmq")`` write rows as messages (:mod:`.sink`).

    Rows carry RocketMQ ``MessageExt`` fields (see :data:`rocketstream.store.MESSAGE_SCHEMA`);
    a narrower ``.schema(...)`` makes the executors decode only those columns.
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        # Spark asks for the schema at load() (unless one is given): fail on bad options there, early.
        parse_options(self.options, streaming=False)
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return batch_reader(parse_options(self.options, streaming=False), projection_for(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RocketMQStreamReader(parse_options(self.options, streaming=True), projection_for(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return sink_writer(self.options, schema, overwrite, streaming=False)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return sink_writer(self.options, schema, overwrite, streaming=True)
