"""The package's modules import one way: every module imports on its own in a fresh interpreter, and the graph of
its ``import`` statements (those inside functions too: a circle closed by a deferred import is a circle all the
same, one hoisted import away from an ImportError) has no cycle."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import paraformer_asr

PACKAGE = paraformer_asr.__name__
SOURCE = Path(paraformer_asr.__file__).resolve().parent

# Run in a child interpreter: for each module, forget every module of the package, import it alone, and report
# the import errors that come from the package itself (a circle: "partially initialized module"), not a missing
# optional third-party package.
FRESH_IMPORTS = """
import importlib, json, sys
failures = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m == %(package)r or m.startswith(%(package)r + ".")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        if not (isinstance(exc, ModuleNotFoundError) and not (exc.name or "").startswith(%(package)r)):
            failures[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failures))
""" % {"package": PACKAGE}


def module_files() -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the package (a package is its __init__.py)."""
    modules = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


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


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = module_files()
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
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles among the package's modules:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_every_module_imports_alone_in_a_fresh_interpreter():
    names = sorted(module_files())
    path = os.pathsep.join(filter(None, [str(SOURCE.parent), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", FRESH_IMPORTS, json.dumps(names)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failures, "modules that do not import alone:\n" + "\n".join(f"{k}: {v}" for k, v in failures.items())
