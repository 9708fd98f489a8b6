"""The broker.conf in force is found as a RocketMQ broker finds its config: --conf / ROCKETSTREAM_CONF,
else ./conf/broker.conf, else the built-in defaults shipped in the package."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketstream.errors import StoreConfigError
from rocketstream.store.meta.config import (
    BUILTIN_BROKER_CONF,
    CONF_ENV,
    StoreConfig,
    default_broker_conf,
    parse_properties,
)

REPO = Path(__file__).resolve().parents[2]


def test_built_in_defaults_are_the_repository_conf():
    ours = parse_properties((REPO / "conf" / "broker.conf").read_text("latin-1"))
    shipped = parse_properties(BUILTIN_BROKER_CONF.read_text("latin-1"))
    assert shipped == ours
    log = "log4j2.properties"
    assert parse_properties((REPO / "conf" / log).read_text("latin-1")) == \
        parse_properties((BUILTIN_BROKER_CONF.parent / log).read_text("latin-1"))


def test_lookup_order(tmp_path, monkeypatch):
    monkeypatch.delenv(CONF_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_broker_conf() == BUILTIN_BROKER_CONF
    # relative paths of the built-in defaults are relative to the working directory
    assert StoreConfig.from_broker_conf(BUILTIN_BROKER_CONF).store_path_root_dir == tmp_path / "storage"
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "broker.conf").write_text("brokerName=local\n")
    assert default_broker_conf() == tmp_path / "conf" / "broker.conf"
    named = tmp_path / "elsewhere.conf"
    named.write_text("brokerName=named\n")
    monkeypatch.setenv(CONF_ENV, str(named))
    assert StoreConfig.from_broker_conf(default_broker_conf()).broker_name == "named"
    monkeypatch.setenv(CONF_ENV, str(tmp_path / "missing.conf"))
    with pytest.raises(StoreConfigError, match="does not exist"):
        default_broker_conf()
