"""Stores written by the real Apache RocketMQ 4.9.8 broker: the session fixtures ``real_stores``,
``peer_classes`` and ``copy_of`` live in tests/conftest.py, so that every test directory that needs
them (realstore, broker, ...) shares one generation per session."""
