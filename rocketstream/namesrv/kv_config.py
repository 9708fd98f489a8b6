"""``KVConfigManager``: namespace -> key -> value, optionally persisted as ``kvConfig.json``
(``{"configTable":{namespace:{key:value}}}``, fastjson pretty form as ``KVConfigManager.persist``)."""

from __future__ import annotations

import logging
from pathlib import Path

from rocketstream.errors import BodyError
from rocketstream.fsutil import write_atomic
from rocketstream.remoting import json_body as _json

__all__ = ["KVConfigManager", "NAMESPACE_ORDER_TOPIC_CONFIG"]

log = logging.getLogger("rocketstream.namesrv")

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"   # NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG


class KVConfigManager:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.config_table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        if self.path is None or not self.path.is_file():
            return
        doc = _json.loads(self.path.read_bytes(), what=f"KV config file {self.path}")
        table = doc.get("configTable") if isinstance(doc, dict) else None
        if not isinstance(table, dict):
            raise BodyError(f"KV config file {self.path} has no configTable object")
        self.config_table = {str(ns): {str(k): str(v) for k, v in kv.items()}
                             for ns, kv in table.items() if isinstance(kv, dict)}

    def persist(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, _json.dumps_pretty({"configTable": self.config_table}).encode("utf-8"))

    def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        self.config_table.setdefault(namespace, {})[key] = value
        log.info("putKVConfig %s %s %s", namespace, key, value)
        self.persist()

    def delete_kv_config(self, namespace: str, key: str) -> None:
        kv = self.config_table.get(namespace)
        if kv is not None and kv.pop(key, None) is not None:
            log.info("deleteKVConfig %s %s", namespace, key)
        self.persist()

    def get_kv_config(self, namespace: str, key: str) -> str | None:
        return self.config_table.get(namespace, {}).get(key)

    def get_kv_list_by_namespace(self, namespace: str) -> bytes | None:
        """A ``KVTable`` body (``{"table":{...}}``), or None when the namespace is unknown."""
        kv = self.config_table.get(namespace)
        return None if kv is None else _json.dumps({"table": kv})
