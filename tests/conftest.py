"""Shared fixtures. Spark fixtures live in tests/spark/conftest.py."""
