"""The package's modules import one way: every module imports on its own in a fresh interpreter, and the graph of
its ``import`` statements (those inside functions too: a circle closed by a deferred import is a circle all the
same, one hoisted import away from an ImportError) has no cycle. The tools beside it (``paraformer_asr_tools``: corpus
makers, benchmarks) import alone too, and the library imports nothing from them. No module of either package is
longer than MAX_MODULE_LINES: a reader finds the code by the names of small modules."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import paraformer_asr

PACKAGE = paraformer_asr.__name__
SOURCE = Path(paraformer_asr.__file__).resolve().parent
TOOLS = "paraformer_asr_tools"
TOOLS_SOURCE = SOURCE.parent / TOOLS  # installed beside the library (src/ in the repository, site-packages otherwise)
MAX_MODULE_LINES = 400

# Run in a child interpreter: for each module, forget every module of the library and the tools, import it alone,
# and report the import errors that come from the two packages themselves (a circle: "partially initialized
# module"), not a missing optional third-party package.
FRESH_IMPORTS = """
import importlib, json, sys
ours = (%(package)r, %(tools)r)
failures = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m in ours or m.startswith(tuple(p + "." for p in ours))]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        if not (isinstance(exc, ModuleNotFoundError) and not (exc.name or "").startswith(ours)):
            failures[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failures))
""" % {"package": PACKAGE, "tools": TOOLS}


def module_files(source: Path = SOURCE) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the package in ``source`` (the library unless told; a
    package is its __init__.py)."""
    modules = {}
    for path in sorted(source.rglob("*.py")):
        parts = path.relative_to(source.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def absolute_imports(path: Path) -> set[str]:
    """The modules a file's ``import`` and ``from ... import`` statements name, relative ones left out."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module)
    return found


def long_modules(paths: list[Path], limit: int) -> dict[Path, int]:
    """The files among ``paths`` with more than ``limit`` lines -> their line counts."""
    counts = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in paths}
    return {path: count for path, count in counts.items() if count > limit}


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that the ``import`` statements of module ``name`` (anywhere in the file) name:
    ``from a.b import c`` means the module a.b.c when there is one, else a.b."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: up from this module's package
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names)
    return {module for module in found if module in modules and module != name}


def import_graph(*sources: Path) -> dict[str, set[str]]:
    """Module -> the modules it imports, over the packages in ``sources`` (the library's alone unless told)."""
    modules = {name: path for source in sources or (SOURCE,) for name, path in module_files(source).items()}
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk of ``graph`` closes (one per edge back to a module still on the walk's
    path), each as the modules around it, first module repeated at the end."""
    cycles, done, path = [], set(), []

    def visit(node: str) -> None:
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if target in path:
                cycles.append(path[path.index(target):] + [target])
            elif target not in done:
                visit(target)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            visit(node)
    return cycles


def test_find_cycles_reports_a_circle_and_passes_a_diamond():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) == []
    assert find_cycles({"a": {"a"}}) == [["a", "a"]]


def test_the_import_graph_is_read_from_the_sources():
    graph = import_graph()
    assert f"{PACKAGE}.deploy.export" in graph and f"{PACKAGE}.errors" in graph[f"{PACKAGE}.deploy.onnx_extra"]
    # a deferred import counts: load_model imports the onnxruntime backend inside the function
    assert f"{PACKAGE}.deploy.runtime" in graph[f"{PACKAGE}.inference"]


def test_the_package_has_no_import_cycle():
    cycles = find_cycles(import_graph(SOURCE, TOOLS_SOURCE))
    assert not cycles, "import cycles among the packages' modules:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_interpreter():
    names = sorted(module_files()) + sorted(module_files(TOOLS_SOURCE))
    path = os.pathsep.join(filter(None, [str(SOURCE.parent), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", FRESH_IMPORTS, json.dumps(names)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failures, "modules that do not import alone:\n" + "\n".join(f"{k}: {v}" for k, v in failures.items())


def test_the_tools_are_installed_beside_the_library():
    assert f"{TOOLS}.corpus.synthesis" in module_files(TOOLS_SOURCE)
    assert f"{TOOLS}.benchmarks.long_form" in module_files(TOOLS_SOURCE)


def test_the_library_imports_nothing_from_the_tools():
    found = sorted(f"{name} -> {target}" for name, path in module_files().items() for target in absolute_imports(path)
                   if target == TOOLS or target.startswith(TOOLS + "."))
    assert not found, "the library imports the tools (move what it needs into the library):\n" + "\n".join(found)


def test_long_modules_are_found_with_their_line_counts(tmp_path):
    short, long = tmp_path / "short.py", tmp_path / "long.py"
    short.write_text("x = 1\n" * 400, encoding="utf-8")
    long.write_text("x = 1\n" * 401, encoding="utf-8")
    assert long_modules([short, long], 400) == {long: 401}


def test_no_module_is_longer_than_the_limit():
    paths = list(module_files().values()) + list(module_files(TOOLS_SOURCE).values())
    found = long_modules(paths, MAX_MODULE_LINES)
    assert not found, f"modules over {MAX_MODULE_LINES} lines (split them along their seams):\n" + "\n".join(
        f"{path.relative_to(SOURCE.parent)}: {count} lines" for path, count in sorted(found.items()))
