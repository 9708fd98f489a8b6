"""Re-execute the notebooks in place and refresh their README screenshots.

    python notebooks/render.py                       # both notebooks, against the default store
    python notebooks/render.py consumer_lag.ipynb    # one notebook
    python notebooks/render.py --store /tmp/scratch  # another store root (sets ROCKETSTREAM_STORE)

Each notebook runs top to bottom in a kernel of the Python running this script (a kernelspec pointing
at ``sys.executable`` is written to a temporary JUPYTER_PATH, so no kernel needs to be installed).
Outputs are written back into the ``.ipynb`` so the committed notebooks read well on a code host, and
the image output of the cell tagged ``screenshot`` is saved to ``docs/img/<notebook>.png`` (kept under
100 KB). ``tests/test_notebooks.py`` re-executes the notebooks against an empty store and compares the
outputs of the cells tagged ``deterministic`` with the committed ones, so render against a store
where the notebooks' sample topics are either absent or were written by the notebooks themselves
(the default store ``./storage`` normally is).

This file is also the test's harness: ``execute``, ``deterministic_outputs`` and ``screenshot_png``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NOTEBOOKS_DIR = Path(__file__).resolve().parent
REPO_ROOT = NOTEBOOKS_DIR.parent
IMG_DIR = REPO_ROOT / "docs" / "img"
NOTEBOOKS = ("explore_topics.ipynb", "consumer_lag.ipynb")
KERNEL_NAME = "rocketstream-python"
DETERMINISTIC_TAG = "deterministic"
SCREENSHOT_TAG = "screenshot"
MAX_PNG_BYTES = 100 * 1024


@contextlib.contextmanager
def _environment(**changes: str | None) -> Iterator[None]:
    """Set (or, for None, remove) environment variables for the duration; the kernel inherits them."""
    saved = {k: os.environ.get(k) for k in changes}
    try:
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _write_kernelspec(jupyter_dir: Path) -> None:
    """A kernelspec for the current interpreter, so the kernel sees exactly this environment."""
    spec_dir = jupyter_dir / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (rocketstream)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))


def execute(path: Path, *, store: Path | None = None, timeout: int = 600) -> tuple[Any, float]:
    """Run the notebook at ``path`` top to bottom; return (executed notebook, seconds).

    ``store`` becomes ROCKETSTREAM_STORE in the kernel; None removes the variable so the notebook
    uses the default store. A cell that raises makes this raise ``nbclient.exceptions.CellExecutionError``.
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="rocketstream-jupyter-") as jupyter_dir:
        _write_kernelspec(Path(jupyter_dir))
        path_env = (os.pathsep.join([jupyter_dir, os.environ["JUPYTER_PATH"]]) if os.environ.get("JUPYTER_PATH")
                    else jupyter_dir)
        with _environment(
            JUPYTER_PATH=path_env,
            # Connection files and the IPython profile in the temporary directory too: no user startup
            # scripts or config change what the cells print.
            JUPYTER_RUNTIME_DIR=str(Path(jupyter_dir) / "runtime"),
            IPYTHONDIR=str(Path(jupyter_dir) / "ipython"),
            ROCKETSTREAM_STORE=None if store is None else str(store),
            # Spark's Python workers must run this interpreter too (PySpark defaults to `python3` on PATH).
            PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
        ):
            client = NotebookClient(
                nb,
                timeout=timeout,
                kernel_name=KERNEL_NAME,
                resources={"metadata": {"path": str(path.parent)}},
                record_timing=False,
            )
            start = time.monotonic()
            client.execute()
            seconds = time.monotonic() - start
    # Keep the committed metadata independent of the machine that rendered it.
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    return nb, seconds


def _tags(cell: Any) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def deterministic_outputs(nb: Any) -> list[tuple[int, list[tuple[str, str]]]]:
    """(cell index, normalized outputs) of every code cell tagged ``deterministic``.

    Normalized: stdout text (stream chunks joined, since their split is timing-dependent) and the
    text/plain of results and displays. stderr and images are left out: JVM warnings and PNG bytes are
    not part of what the cell asserts.
    """
    result = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or DETERMINISTIC_TAG not in _tags(cell):
            continue
        outputs: list[tuple[str, str]] = []
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                if out.name != "stdout":
                    continue
                if outputs and outputs[-1][0] == "stdout":
                    outputs[-1] = ("stdout", outputs[-1][1] + out.text)
                else:
                    outputs.append(("stdout", out.text))
            elif out.output_type in ("execute_result", "display_data"):
                text = out.get("data", {}).get("text/plain")
                if text is not None:
                    outputs.append((out.output_type, text))
            elif out.output_type == "error":
                outputs.append(("error", f"{out.ename}: {out.evalue}"))
        result.append((index, outputs))
    return result


def screenshot_png(nb: Any) -> bytes | None:
    """The first PNG output of the cell tagged ``screenshot``, or None."""
    for cell in nb.cells:
        if cell.cell_type == "code" and SCREENSHOT_TAG in _tags(cell):
            for out in cell.get("outputs", []):
                png = out.get("data", {}).get("image/png")
                if png:
                    return base64.b64decode(png)
    return None


def small_png(png: bytes, limit: int = MAX_PNG_BYTES) -> bytes:
    """``png`` re-encoded as a palette image (and downscaled if still needed) to fit under ``limit``."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    while True:
        buf = io.BytesIO()
        image.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(buf, format="PNG", optimize=True)
        if buf.tell() <= limit or image.width < 400:
            return buf.getvalue()
        image = image.resize((image.width * 4 // 5, image.height * 4 // 5), Image.Resampling.LANCZOS)


def render(name: str, store: Path | None) -> None:
    import nbformat

    path = NOTEBOOKS_DIR / name
    before = deterministic_outputs(nbformat.read(path, as_version=4))
    nb, seconds = execute(path, store=store)
    nbformat.write(nb, path)
    after = deterministic_outputs(nb)
    changed = sum(1 for a, b in zip(before, after, strict=False) if a != b) + abs(len(before) - len(after))
    line = f"{name}: executed in {seconds:.1f} s; {len(after)} deterministic cells"
    line += f", {changed} changed" if changed else ", unchanged"
    png = screenshot_png(nb)
    if png is not None:
        IMG_DIR.mkdir(parents=True, exist_ok=True)
        dest = IMG_DIR / (path.stem + ".png")
        data = small_png(png)
        dest.write_bytes(data)
        line += f"; {dest.relative_to(REPO_ROOT)} ({len(data) // 1024} KB)"
    print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", default=list(NOTEBOOKS), help="notebook file names (default: all)")
    parser.add_argument("--store", type=Path, default=None, help="store root (default: the CLI's default store)")
    args = parser.parse_args(argv)
    for name in args.notebooks:
        render(Path(name).name, args.store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
