"""The notebooks run top to bottom against an empty store, and their committed outputs are current.

Each notebook is executed with nbclient in a kernel of this interpreter, with ROCKETSTREAM_STORE
pointing at a fresh temporary store, so the notebook writes its own sample data. The notebooks run at
the same time, each driven by a process of its own (``render.execute``, the executed notebook written to
a file), started while the store unit tests run (see ``start_early``): much of a notebook's time is
waiting (its producer's pace, JVM and kernel starts). A cell error fails the test. The committed
notebooks keep their outputs; the cells tagged ``deterministic`` print only things fixed by the code and
the seeded sample data, so their re-executed outputs must equal the committed ones — when they differ,
re-render with ``python notebooks/render.py`` and commit.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
# Each notebook must finish in under two minutes on a 2-core machine; leave headroom for a busy one.
BUDGET_SECONDS = 240


def _harness():
    spec = importlib.util.spec_from_file_location("notebooks_render", NOTEBOOKS_DIR / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = _harness()


def _diff(committed: list, current: list) -> str:
    lines = []
    for (index, old), (_, new) in zip(committed, current, strict=False):  # lengths compared by the caller
        if old != new:
            lines.append(f"cell {index}:\n  committed: {old!r}\n  current:   {new!r}")
    return "\n".join(lines)


@pytest.mark.parametrize("name", render.NOTEBOOKS)
def test_committed_notebook_was_executed_top_to_bottom(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
        f"{name}: committed outputs are not from one top-to-bottom run; run python notebooks/render.py"
    )
    errors = [i for i, c in enumerate(nb.cells) for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, f"{name}: committed cells {errors} hold errors"
    assert render.deterministic_outputs(nb), f"{name}: no cell is tagged {render.DETERMINISTIC_TAG!r}"
    assert render.screenshot_png(nb) is not None, f"{name}: the {render.SCREENSHOT_TAG!r} cell has no image"


# one notebook executed by render.execute in a process of its own; the executed notebook goes to argv[4]
RUNNER = """
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, sys.argv[1])
import render

nb, seconds = render.execute(Path(sys.argv[2]), store=Path(sys.argv[3]))
nbformat.write(nb, sys.argv[4])
print(f"SECONDS {seconds}")
"""


# The notebooks are started while the store unit tests run (tests/conftest.py "subprocess work started ahead
# of its test"): those are single-threaded and leave a core to the kernels and their Spark JVMs, and the
# session does not wait a whole notebook run at its end. A run of this file alone starts them in the fixture.
START_EARLY_BEFORE = "tests/store/"
_RUNS: dict[str, tuple[subprocess.Popen, Path]] = {}


def start_early(config) -> None:
    """Every notebook started at once (once per session): {name: (process, executed notebook path)}."""
    if _RUNS:
        return

    def kill() -> None:
        for proc, _ in _RUNS.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    config.add_cleanup(kill)
    factory = config._tmp_path_factory
    for name in render.NOTEBOOKS:
        work = factory.mktemp(Path(name).stem)
        out = work / name
        # output to files: nobody reads a pipe while the tests in between run, and a full pipe would block
        with open(work / "stdout.txt", "wb") as stdout, open(work / "stderr.txt", "wb") as stderr:
            proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(NOTEBOOKS_DIR), str(NOTEBOOKS_DIR / name),
                                     str(work / "storage"), str(out)], stdout=stdout, stderr=stderr)
        _RUNS[name] = (proc, out)


@pytest.fixture(scope="module")
def executions(request):
    """{name: (process, executed notebook path)}; unfinished ones are killed when the module is done."""
    start_early(request.config)
    try:
        yield _RUNS
    finally:
        for proc, _ in _RUNS.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.spark
@pytest.mark.parametrize("name", render.NOTEBOOKS)
def test_notebook_runs_and_reproduces_its_deterministic_outputs(name: str, executions) -> None:
    proc, out = executions[name]
    proc.wait(timeout=2 * BUDGET_SECONDS)
    stdout, stderr = ((out.parent / f).read_text(errors="replace") for f in ("stdout.txt", "stderr.txt"))
    # a failing cell: render.execute raised nbclient's CellExecutionError (its text names the cell)
    assert proc.returncode == 0, f"{name}: execution failed:\n{stderr[-5000:]}"
    elapsed = float(next(x for x in stdout.splitlines() if x.startswith("SECONDS ")).split()[1])
    committed = render.deterministic_outputs(nbformat.read(NOTEBOOKS_DIR / name, as_version=4))
    current = render.deterministic_outputs(nbformat.read(out, as_version=4))
    assert [i for i, _ in current] == [i for i, _ in committed], f"{name}: deterministic cells moved; re-render"
    assert current == committed, (
        f"{name}: outputs differ from the committed ones (re-render with python notebooks/render.py):\n"
        + _diff(committed, current)
    )
    assert elapsed < BUDGET_SECONDS, f"{name} took {elapsed:.0f} s"
