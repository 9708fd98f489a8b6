"""rocketstream: a RocketMQ-compatible broker store that Spark reads as format("rocketmq")."""

__version__ = "0.1.0"
