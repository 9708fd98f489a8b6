"""Spark integration: the ``rocketmq`` data source (batch and streaming) over a RocketMQ store.

Importing this package needs pyspark; the store and client layers do not.
"""

from __future__ import annotations

from typing import Any

from rocketstream.spark.source import FORMAT_NAME, RocketMQDataSource


def register(spark: Any) -> None:
    """Register ``format("rocketmq")`` with ``spark`` (not needed after ``pip install``: Spark
    auto-discovers the top-level ``pyspark_rocketmq`` module)."""
    spark.dataSource.register(RocketMQDataSource)


__all__ = ["FORMAT_NAME", "RocketMQDataSource", "register"]
