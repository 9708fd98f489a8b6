"""Auto-discovery hook: Spark imports top-level ``pyspark_*`` modules and registers their
``DefaultSource`` under ``DefaultSource.name()`` — here ``format("rocketmq")``.

Keep this import light and failure-free: one broken ``pyspark_*`` module hides all of them.
"""

from rocketstream.spark.source import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
