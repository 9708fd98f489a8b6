"""DESIGN.md's layer rules, read from the source: every ``import`` of every module under ``rocketstream/``.

Layers (dependencies point down only)::

    cli / demo  ->  spark  ->  client  ->  remoting  ->  codec
                           ->  store   ------------->  codec
    cli / serve ->  broker ->  store, remoting, codec (client's pure maths at most), never spark or namesrv
                ->  namesrv -> remoting, codec

* ``codec`` imports nothing of ours but ``rocketstream.errors``, and that only while ``errors`` itself
  imports nothing of ours.
* ``store`` imports only ``codec`` (+ errors, fsutil); ``client`` only ``codec`` and ``remoting`` (+ errors, fsutil: a
  BROADCASTING consumer's offsets.json);
  ``remoting`` only ``codec`` (+ errors); ``namesrv`` only ``remoting`` and ``codec`` (+ errors, fsutil);
  ``broker`` never ``spark`` and never ``namesrv`` (the ``serve`` command composes the two: rocketstream/serve.py).
  ``fsutil`` (crash-safe file replace, shared by the store and the name server) sits at the bottom with
  ``errors``: neither imports anything of ours.
* Spark's network mode imports no store: neither a network-mode module nor anything it imports (transitively,
  any module of ours; every kind of import counts, as for cycles below) imports a ``store`` module. Network
  mode is every module under ``spark/`` with "network" in its name or in its package's
  (``spark/network_view.py``, ``spark/network/...``). The local-mode view (a spark module with "local" in its
  name or its package's) is not followed: it is the one place spark opens a store.
* Spark sends no raw remoting commands: no spark module imports or uses ``RemotingCommand`` (it asks the
  client's ``MQClientAPI``); request and response code names are fine.
* No module imports a ``_private`` name (or a ``_private`` module) of a different package (a reach-in
  through an attribute, ``store._queues``, is no import: this test cannot see it).
* No import cycle between modules. Every import counts: module level, inside a function (a deferred
  import hides a cycle, it does not remove it) and under ``TYPE_CHECKING`` (a type-level cycle is still a
  cycle: give the lower module a Protocol).

And what importing costs (in a fresh interpreter): ``import rocketstream.codec`` loads no pyarrow and no
pyspark; ``import rocketstream.client`` loads no store module and no pyspark (each with every submodule of
the package imported too).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rocketstream"
OURS = "rocketstream"

# layer -> the layers it may import besides itself (None: anything; checked by other rules)
ALLOWED: dict[str, set[str] | None] = {
    "codec": {"errors"},
    "store": {"codec", "errors", "fsutil"},
    "remoting": {"codec", "errors"},
    "client": {"codec", "remoting", "errors", "fsutil"},
    "namesrv": {"codec", "remoting", "errors", "fsutil"},
}
BOTTOM = ("errors", "fsutil")   # modules below every layer: they import nothing of ours
NEVER: dict[str, set[str]] = {"broker": {"spark", "namesrv"}}
SPARK = f"{OURS}.spark"
NETWORK_MODE = "network"   # in a spark module's name (or a package's above it): network mode
LOCAL_MODE_VIEW = "local"  # in a spark module's name (or a package's above it): the local-mode view


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported module (ours), resolved to the deepest module that exists
    names: tuple[str, ...]  # names taken by ``from target import ...``
    line: int

    def __str__(self) -> str:
        what = f"from {self.target} import {', '.join(self.names)}" if self.names else f"import {self.target}"
        return f"{self.source}:{self.line}: {what}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _package_of(module: str) -> str:
    """The package a module's code lives in (a package's ``__init__`` lives in the package itself)."""
    return module if MODULES.get(module, Path()).name == "__init__.py" else module.rpartition(".")[0]


def _resolve(level: int, module: str | None, importer: str) -> str:
    if level == 0:
        return module or ""
    package = _package_of(importer).split(".")
    package = package[: len(package) - (level - 1)]
    return ".".join(package + ([module] if module else []))


def _edges(module: str, path: Path) -> list[Edge]:
    edges = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            edges += [Edge(module, a.name, (), node.lineno) for a in node.names if a.name.split(".")[0] == OURS]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node.level, node.module, module)
            if target.split(".")[0] != OURS:
                continue
            plain = []
            for alias in node.names:  # ``from pkg import submodule`` imports the submodule
                sub = f"{target}.{alias.name}"
                if sub in MODULES:
                    edges.append(Edge(module, sub, (), node.lineno))
                else:
                    plain.append(alias.name)
            if plain or not node.names:
                edges.append(Edge(module, target, tuple(plain), node.lineno))
    return edges


EDGES = [e for m, p in MODULES.items() for e in _edges(m, p)]


def _layer(module: str) -> str:
    """``rocketstream.store.files.commit_log`` -> ``store``; ``rocketstream.errors`` -> ``errors``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_target_layers_exist() -> None:
    """The rules below are vacuous for a layer with no modules."""
    layers = {_layer(m) for m in MODULES}
    assert {"codec", "store", "client", "spark"} <= layers, f"layers found: {sorted(layers)}"


@pytest.mark.parametrize("bottom", BOTTOM)
def test_bottom_modules_import_nothing_of_ours(bottom: str) -> None:
    """``codec`` may import ``rocketstream.errors``, and ``store`` and ``namesrv`` ``rocketstream.fsutil``
    (RocketMQ's common ``MixAll.string2File``: the crash-safe file replace both persist through), only
    because those modules sit below everything."""
    assert f"{OURS}.{bottom}" in MODULES
    bad = [str(e) for e in EDGES if _layer(e.source) == bottom]
    assert not bad, bad


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_the_layers_below(layer: str) -> None:
    allowed = ALLOWED[layer] | {layer}
    bad = [f"{e}  ({_layer(e.target) or OURS} is not below {layer})"
           for e in EDGES if _layer(e.source) == layer and _layer(e.target) not in allowed]
    assert not bad, "\n".join(bad)


def _forbidden(edges: list[Edge], never: dict[str, set[str]]) -> list[str]:
    return [f"{e}  ({_layer(e.source)} never imports {_layer(e.target)})"
            for e in edges if _layer(e.target) in never.get(_layer(e.source), set())]


def test_forbidden_finder_finds_a_forbidden_import() -> None:
    edges = [Edge("rocketstream.broker.controller", "rocketstream.namesrv", ("NamesrvController",), 1),
             Edge("rocketstream.broker.pull", "rocketstream.store.message_store", (), 2),
             Edge("rocketstream.serve", "rocketstream.namesrv", (), 3),
             Edge("rocketstream.broker.send", "rocketstream.spark.source", (), 4)]
    assert [b.split(":")[1] for b in _forbidden(edges, NEVER)] == ["1", "4"]


@pytest.mark.parametrize("layer", sorted(NEVER))
def test_layer_never_imports(layer: str) -> None:
    bad = _forbidden([e for e in EDGES if _layer(e.source) == layer], NEVER)
    assert not bad, "\n".join(bad)


def _spark_mode(module: str, mode: str) -> bool:
    """Whether ``mode`` is in the name of a spark module or of a package it is in."""
    parts = module.split(".")
    return parts[:2] == SPARK.split(".") and any(mode in p for p in parts[2:])


def _network_store_imports(modules: list[str], edges: list[Edge]) -> list[str]:
    """Imports of a ``store`` module by network-mode modules or by anything they import (transitively,
    every layer of ours; the local-mode view is not followed), each with the chain that reaches it."""
    graph: dict[str, list[Edge]] = {}
    for e in edges:
        graph.setdefault(e.source, []).append(e)
    start = sorted(m for m in modules if _spark_mode(m, NETWORK_MODE))
    via: dict[str, str | None] = dict.fromkeys(start)
    queue = list(start)
    bad = []
    while queue:
        module = queue.pop(0)
        for e in sorted(graph.get(module, []), key=lambda e: (e.line, e.target)):
            if _layer(e.target) == "store":
                chain, m = [], module
                while m is not None:
                    chain.append(m)
                    m = via[m]
                bad.append(f"{e}  (network mode: {' <- '.join(chain)})")
            elif e.target not in via and not _spark_mode(e.target, LOCAL_MODE_VIEW):
                via[e.target] = module
                queue.append(e.target)
    return bad


def test_network_store_finder_finds_a_store_import() -> None:
    """Flagged: a network module's own store import (1) and one two modules down (4); not followed: the
    local view (5) and a module no network module imports (6)."""
    modules = ["rocketstream.spark.network.pull", "rocketstream.spark.network_view", "rocketstream.spark.plan",
               "rocketstream.spark.local_view", "rocketstream.spark.sink", "rocketstream.client.api"]
    edges = [Edge("rocketstream.spark.network_view", "rocketstream.store.read.bulk_read", ("ColumnBuilder",), 1),
             Edge("rocketstream.spark.network.pull", "rocketstream.spark.plan", (), 2),
             Edge("rocketstream.spark.plan", "rocketstream.client.api", (), 3),
             Edge("rocketstream.spark.plan", "rocketstream.store", ("MessageStore",), 4),
             Edge("rocketstream.spark.network_view", "rocketstream.spark.local_view", (), 5),
             Edge("rocketstream.spark.local_view", "rocketstream.store", ("MessageStore",), 5),
             Edge("rocketstream.spark.sink", "rocketstream.store", ("MessageStore",), 6)]
    bad = _network_store_imports(modules, edges)
    assert [b.split(":")[1] for b in bad] == ["1", "4"]
    assert bad[1].endswith("(network mode: rocketstream.spark.plan <- rocketstream.spark.network.pull)")


def test_spark_network_mode_imports_no_store() -> None:
    """Network mode runs where there is no store (an executor reading a remote cluster): like the client,
    it must not need one."""
    network = [m for m in MODULES if _spark_mode(m, NETWORK_MODE)]
    assert network, f"no spark module with {NETWORK_MODE!r} in its name: the rule would pass vacuously"
    bad = _network_store_imports(sorted(MODULES), EDGES)
    assert not bad, "\n".join(bad)


RAW_COMMAND = "RemotingCommand"


def _raw_commands(module: str, source: str) -> list[str]:
    """Where ``source`` imports ``RemotingCommand`` (by name, or ``*`` from ``rocketstream.remoting``), uses it,
    or calls ``RemotingCommand.request(...)``."""
    found: set[tuple[int, str]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(node.level, node.module, module)
            for alias in node.names:
                if alias.name == RAW_COMMAND or (alias.name == "*" and target.startswith(f"{OURS}.remoting")):
                    found.add((node.lineno, f"imports {alias.name} from {target}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "request":
            owner = node.func.value
            if (isinstance(owner, ast.Name) and owner.id == RAW_COMMAND) or (
                    isinstance(owner, ast.Attribute) and owner.attr == RAW_COMMAND):
                found.add((node.lineno, f"builds {RAW_COMMAND}.request(...)"))
        elif (isinstance(node, ast.Name) and node.id == RAW_COMMAND) or (
                isinstance(node, ast.Attribute) and node.attr == RAW_COMMAND):
            found.add((node.lineno, f"uses {RAW_COMMAND}"))
    return [f"{module}:{line}: {what}" for line, what in sorted(found)]


def test_raw_command_finder_finds_raw_commands() -> None:
    source = "\n".join([
        "from rocketstream.remoting import RemotingCommand as RC, RequestCode",            # 1: the import
        "from rocketstream.remoting import command",                                       # 2
        "req = command.RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {})",      # 3: built
        "from rocketstream.remoting.command import *",                                     # 4: star import
        "code = RequestCode.PULL_MESSAGE",                                                 # 5: a name is fine
        "def f(api):",
        "    return api.request(code), isinstance(api, RemotingCommand)",                  # 7: a use
        "from ..remoting import *",                                                        # 8: relative star import
        "from ..client import api",                                                        # 9
    ])
    found = _raw_commands("rocketstream.spark.network_view", source)
    assert [(f.split(":")[1], f.split(": ")[1].split()[0]) for f in found] == [
        ("1", "imports"), ("3", "builds"), ("3", "uses"), ("4", "imports"), ("7", "uses"), ("8", "imports")]
    assert found[-1].endswith("imports * from rocketstream.remoting")


def test_spark_sends_no_raw_remoting_commands() -> None:
    """Every request spark makes goes through the client (``MQClientAPI`` methods): spark builds no frames."""
    spark = [m for m in MODULES if _layer(m) == "spark"]
    assert spark
    bad = [f for m in spark for f in _raw_commands(m, MODULES[m].read_text())]
    assert not bad, "\n".join(bad)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_reaches(edges: list[Edge]) -> list[str]:
    bad = []
    for e in edges:
        if _package_of(e.source) == _package_of(e.target):
            continue  # a module's private names are open to its own package
        private_module = [p for p in e.target.split(".") if _private(p)]
        private_names = [n for n in e.names if _private(n)]
        if private_module or private_names:
            bad.append(f"{e}  (private to {_package_of(e.target)})")
    return bad


def test_private_finder_finds_a_reach_in() -> None:
    edges = [Edge("rocketstream.store.check", "rocketstream.store.message_store", ("_lock",), 1),  # same package
             Edge("rocketstream.spark.batch", "rocketstream.client.offset_ranges", ("_QUEUE_ID",), 2),
             Edge("rocketstream.spark.batch", "rocketstream.client._java", (), 3)]
    assert [b.split(":")[1] for b in _private_reaches(edges)] == ["2", "3"]


def test_no_private_names_across_packages() -> None:
    bad = _private_reaches(EDGES)
    assert not bad, "\n".join(bad)


def _cycles(nodes: list[str], edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {m: set() for m in nodes}
    for e in edges:
        if e.target in graph and e.target != e.source:
            graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    """The finder itself: a -> b -> c -> a is one cycle, d alone is none."""
    edges = [Edge("a", "b", (), 1), Edge("b", "c", (), 1), Edge("c", "a", (), 1), Edge("d", "a", (), 1)]
    assert _cycles(["a", "b", "c", "d"], edges) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    """Package ``__init__`` re-exports count like any import: ``store/__init__`` importing
    ``store.message_store`` that imports ``rocketstream.store`` (the package) is a cycle."""
    cycles = _cycles(sorted(MODULES), EDGES)
    detail = []
    for component in cycles:
        members = set(component)
        detail.append(" <-> ".join(component) + "\n    " + "\n    ".join(
            str(e) for e in EDGES if e.source in members and e.target in members and e.source != e.target))
    assert not cycles, "\n".join(detail)


def _loaded_after(statement: str) -> list[str]:
    """Module names in sys.modules after running ``statement`` in a fresh interpreter."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _heavy(loaded: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in loaded if any(m == p or m.startswith(p + ".") for p in prefixes)]


def _import_all(package: str, *, but: tuple[str, ...] = ()) -> str:
    """A statement importing ``package`` and every module under it except those named in ``but``."""
    return (f"import importlib, pkgutil, {package} as p\n"
            f"for m in pkgutil.walk_packages(p.__path__, '{package}.'):\n"
            f"    if m.name not in {but!r}:\n"
            f"        importlib.import_module(m.name)")


def test_import_codec_loads_no_pyarrow_or_pyspark() -> None:
    """``import rocketstream.codec`` and every codec module but the records-to-Arrow one
    (``codec.arrow_records`` builds Arrow arrays by design and is imported only by the readers that
    want them) load neither pyarrow nor pyspark."""
    loaded = _loaded_after(_import_all("rocketstream.codec", but=("rocketstream.codec.arrow_records",)))
    assert not _heavy(loaded, ("pyarrow", "pyspark")), _heavy(loaded, ("pyarrow", "pyspark"))
    assert "rocketstream.codec.arrow_records" not in loaded


def test_import_client_loads_no_store_and_no_pyspark() -> None:
    """Every client module: the client runs where there is no store and no Spark."""
    loaded = _loaded_after(_import_all("rocketstream.client"))
    heavy = _heavy(loaded, ("rocketstream.store", "pyspark"))
    assert not heavy, heavy


def test_import_checks_see_what_they_look_for() -> None:
    """The sys.modules probe itself: importing the Spark layer does load pyspark."""
    assert _heavy(_loaded_after("import rocketstream.spark.source"), ("pyspark",))
