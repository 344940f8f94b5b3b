"""The package's layers point one way (docs/architecture.md, "Where the code lives"): models/ (the networks and their
losses) imports none of the layers above it, and decode/ (the searches over the models' outputs) imports
models/, data/ and the small leaf modules, never training, deployment or the service. The imports are
read from the sources (test_asr_imports.py's graph: those inside functions count too). That the library imports
nothing from the tools beside it (benchmarks, corpus makers) is test_asr_imports.py's."""

from __future__ import annotations

from test_asr_imports import PACKAGE, import_graph

ABOVE_MODELS = ("decode", "training", "inference", "deploy", "serving", "factory", "cli", "transcribe")
ABOVE_DECODE = ("training", "inference", "deploy", "serving", "factory", "cli", "transcribe")

# Upward imports still there, each (importer, imported): the test fails on a new one and on one that is gone.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def in_layer(module: str, layers: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``layers`` (package-relative names: 'decode' is decode/ and all it holds)."""
    return any(module == f"{PACKAGE}.{layer}" or module.startswith(f"{PACKAGE}.{layer}.") for layer in layers)


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every (importer, imported) pair of ``graph`` that breaks the layer rule."""
    rules = (("models", ABOVE_MODELS), ("decode", ABOVE_DECODE))
    return {(module, target) for layer, above in rules for module, targets in graph.items()
            if in_layer(module, (layer,)) for target in targets if in_layer(target, above)}


def test_upward_imports_are_found():
    graph = {f"{PACKAGE}.models.cif": {f"{PACKAGE}.decode.beam", f"{PACKAGE}.checks"},
             f"{PACKAGE}.decode.beam": {f"{PACKAGE}.models.cif", f"{PACKAGE}.serving.app"},
             f"{PACKAGE}.decoders": {f"{PACKAGE}.training"}}
    assert upward_imports(graph) == {(f"{PACKAGE}.models.cif", f"{PACKAGE}.decode.beam"),
                                     (f"{PACKAGE}.decode.beam", f"{PACKAGE}.serving.app")}


def test_models_and_decode_import_only_downward():
    found = upward_imports(import_graph())
    new = sorted(found - KNOWN_UPWARD)
    gone = sorted(KNOWN_UPWARD - found)
    assert not new, "upward imports (move the code down, or the import up):\n" + "\n".join(
        f"{module} -> {target}" for module, target in new)
    assert not gone, "KNOWN_UPWARD pairs that are gone (delete them from the list):\n" + "\n".join(
        f"{module} -> {target}" for module, target in gone)
