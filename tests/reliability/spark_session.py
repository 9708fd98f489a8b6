"""The Spark session of tests/spark/conftest.py, for the Spark reliability campaigns.

Importing the fixture from here (``from spark_session import spark``) reuses the one local[2] JVM of
the test run: ``SparkSession.builder.getOrCreate()`` hands back the session tests/spark started.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_CONFTEST = Path(__file__).resolve().parents[1] / "spark" / "conftest.py"
_spec = importlib.util.spec_from_file_location("rocketstream_spark_conftest", _CONFTEST)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)  # type: ignore[union-attr]

spark = _module.spark

__all__ = ["spark"]
