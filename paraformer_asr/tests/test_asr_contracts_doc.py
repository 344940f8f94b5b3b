"""docs/tensor_contracts.md names only functions and classes that exist, each with its whole signature.

Every backticked call in a heading or in the first column of a table (``name(a, b=1)``, ``Class.method(a)``,
``Class(a)(call)``, ``Class(a).method(b)``; what follows `` -> `` is the result and is not read) is looked up in the
package, and the arguments it lists must be the parameters of the code's signature, every one of them, in the code's
order: none missing (``self`` / ``cls`` aside; keyword-only parameters with defaults too, so that the doc shows
every option a caller has), none that the code lacks, no ``...`` in their place. A literal such as ``"B,T,D"`` stands
for the parameter at its position; ``*args`` / ``**kw`` stand for the variadic parameters and need them; a bare
``*`` marks where the keyword-only parameters start. A bare name is looked up, in this order, as a method of the
class of an earlier ``Class.method`` in its cell, of the classes the section names (heading first, then the prose
above the table), in the modules it names (the row's own cell first), then as the one function or class of that
name in the package or the tools beside it (paraformer_asr_tools). The docstrings are the source; this keeps the
doc, the reader's map, from drifting."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import paraformer_asr
import paraformer_asr_tools

DOC = Path(__file__).resolve().parents[1] / "docs" / "tensor_contracts.md"
PACKAGE = paraformer_asr.__name__
TOOLS = paraformer_asr_tools.__name__  # the corpus makers and benchmarks beside the library
BACKTICKED = re.compile(r"`([^`]+)`")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def package_modules() -> dict[str, object]:
    """Every module of the library and the tools by its dotted name (the [serve] and [onnx] extras must be
    installed)."""
    modules = {}
    for package in (paraformer_asr, paraformer_asr_tools):
        modules[package.__name__] = package
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            modules[info.name] = importlib.import_module(info.name)
    return modules


def defined_names(modules: dict[str, object]) -> dict[str, list[object]]:
    """Name -> the distinct functions and classes of that name defined in the package's modules."""
    index: dict[str, list[object]] = {}
    for module in modules.values():
        for name, value in vars(module).items():
            if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__.startswith((PACKAGE, TOOLS)):
                found = index.setdefault(name, [])
                if not any(value is other for other in found):
                    found.append(value)
    return index


def split_arguments(text: str) -> list[str]:
    """'a, b=(1, 2), c="x,y"' -> ['a', 'b=(1, 2)', 'c="x,y"']: commas at the top level only."""
    parts, depth, quote, current = [], 0, None, ""
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    return parts + ([current.strip()] if current.strip() else [])


def closing_paren(text: str, start: int) -> int:
    """Index of the ')' closing the '(' at ``start``."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index
    raise ValueError(f"unbalanced parentheses in {text!r}")


def parse_call(span: str) -> tuple[str, list[str], str | None, list[str] | None] | None:
    """A backticked span -> (name, arguments, then, then-arguments) or None when it is no call. ``then`` is
    '__call__' for ``Class(a)(b)``, a method name for ``Class(a).method(b)``, else None."""
    span = span.split(" -> ")[0].strip()
    match = re.match(r"([A-Za-z_][\w.]*)\(", span)
    if not match:
        return None
    end = closing_paren(span, match.end() - 1)
    name, arguments, rest = match.group(1), split_arguments(span[match.end():end]), span[end + 1:].strip()
    chained = re.match(r"(?:\.([A-Za-z_]\w*))?\(", rest)
    if not rest or not chained:
        return name, arguments, None, None
    inner_end = closing_paren(rest, chained.end() - 1)
    return name, arguments, chained.group(1) or "__call__", split_arguments(rest[chained.end():inner_end])


def split_row(line: str) -> list[str]:
    """A Markdown table row -> its cells ('|' inside backticks does not split)."""
    cells, current, in_code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(current.strip())
            current = ""
            continue
        current += char
    return cells + [current.strip()]


def module_names(text: str, modules: dict[str, object]) -> list[str]:
    """The package modules a piece of text names in backticks: 'models/cif.py', 'decode/' (all of it),
    'paraformer_asr.checks', or a module of the tools by its path from their package, as in
    'paraformer_asr_tools/benchmarks/decoding.py'."""
    names = []
    for span in BACKTICKED.findall(text):
        span = span.strip()
        if span.endswith(".py") or span.endswith("/"):
            path = span.removesuffix(".py").rstrip("/").replace("/", ".")
            dotted = path if path == TOOLS or path.startswith(TOOLS + ".") else PACKAGE + "." + path
        elif span.startswith(PACKAGE + ".") or span.startswith(TOOLS + "."):
            dotted = span
        else:
            continue
        names += [name for name in modules if name == dotted or name.startswith(dotted + ".")]
    return names


def class_names(text: str, index: dict[str, list[object]]) -> list[object]:
    """The package classes a piece of text names in backticks (``Class`` or ``Class(args)``), in order."""
    classes = []
    for span in BACKTICKED.findall(text):
        match = IDENTIFIER.match(span.strip())
        if match and match.end() in (len(span.strip()), span.strip().find("(")):
            classes += [c for c in index.get(match.group(0), []) if inspect.isclass(c) and c not in classes]
    return classes


class Scope:
    """Where a table's bare names are looked up: its section's heading and the prose between it and the table."""

    def __init__(self, heading: str, prose: str, modules: dict[str, object], index: dict[str, list[object]]):
        self.classes = class_names(heading, index) + [c for c in class_names(prose, index)
                                                      if c not in class_names(heading, index)]
        self.module_names = module_names(heading, modules) + module_names(prose, modules)
        self.modules, self.index = modules, index

    def resolve(self, name: str, cell: str) -> object | None:
        """The object a name stands for in a row whose first cell is ``cell``, or None."""
        if "." in name:
            owner, attribute = name.split(".", 1)
            owners = [c for c in self.classes if c.__name__ == owner] or \
                [c for c in self.index.get(owner, []) if inspect.isclass(c)]
            return getattr(owners[0], attribute, None) if len(owners) == 1 else None
        for cls in self.classes:
            if name in dir(cls):
                return getattr(cls, name)
        for module_name in module_names(cell, self.modules) + self.module_names:
            value = vars(self.modules[module_name]).get(name)
            if value is not None and (inspect.isfunction(value) or inspect.isclass(value)):
                return value
        found = self.index.get(name, [])
        return found[0] if len(found) == 1 else None


def callable_parameters(value: object, then: str | None = None) -> list[inspect.Parameter]:
    """The parameters a documented call passes: a function's, a class's constructor's, or (``then``) those of the
    instance's ``__call__`` / ``forward`` (modules) or of a method. ``self`` / ``cls`` are left out."""
    if then is not None:
        value = getattr(value, "forward" if then == "__call__" and hasattr(value, "forward") else then)
    parameters = list(inspect.signature(value).parameters.values())
    return parameters[1:] if parameters and parameters[0].name in ("self", "cls") else parameters


def argument_errors(where: str, arguments: list[str], parameters: list[inspect.Parameter]) -> list[str]:
    """The documented arguments against the parameters: names that are not parameters, names out of order, an
    ellipsis for some of them, and parameters the doc leaves out."""
    names = [p.name for p in parameters]
    variadic = {p.kind: p.name for p in parameters
                if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}
    errors, last, listed, ellipsis = [], -1, set(), False
    for argument in arguments:
        if argument.startswith("*"):
            kind = inspect.Parameter.VAR_KEYWORD if argument.startswith("**") else inspect.Parameter.VAR_POSITIONAL
            if argument == "*":  # the start of the keyword-only parameters
                continue
            if kind not in variadic:
                takes = "**keywords" if kind is inspect.Parameter.VAR_KEYWORD else "*arguments"
                errors.append(f"{where}: lists {argument} but takes no {takes} ({', '.join(names)})")
            listed.add(variadic.get(kind))
            continue
        if argument == "...":
            ellipsis = True
            continue
        match = IDENTIFIER.match(argument)
        if not match:  # a literal standing for its position
            last += 1
            listed.update(names[last:last + 1])
            continue
        name = match.group(0)
        if name not in names:
            errors.append(f"{where}: '{name}' is not a parameter (the code has: {', '.join(names)})")
        elif names.index(name) < last:
            errors.append(f"{where}: '{name}' is listed out of the code's order ({', '.join(names)})")
            listed.add(name)
        else:
            last = names.index(name)
            listed.add(name)
    missing = ", ".join(p.name for p in parameters if p.name not in listed)
    if ellipsis:
        errors.append(f"{where}: '...' stands in for {missing or 'nothing'}; list every parameter "
                      f"({', '.join(names)})")
    elif missing:
        errors.append(f"{where}: leaves out {missing} (the code has: {', '.join(names)})")
    return errors


def contract_errors(markdown: str, modules: dict[str, object]) -> tuple[list[str], int]:
    """-> (every drift between the tables' first-column calls and the code, how many calls were checked)."""
    index = defined_names(modules)
    heading, prose, errors, checked = "", "", [], 0
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.startswith("#"):  # a heading's own calls are checked too, e.g. `CifPredictor(d_model, ...)`
            heading, prose, cell = line, "", line
        elif not line.startswith("|"):
            prose += line + "\n"
            continue
        else:
            cell = split_row(line)[0]
        scope, owner = Scope(heading, prose, modules, index), None
        for span in BACKTICKED.findall(cell):  # `Class.a(x)` / `b(y)`: b is Class.b as well
            call = parse_call(span)
            if call is None:
                continue
            name, arguments, then, then_arguments = call
            where = f"line {number}: `{span}`"
            if "." in name:
                owner = name.split(".")[0]
            value = (owner and "." not in name and scope.resolve(f"{owner}.{name}", cell)) or scope.resolve(name, cell)
            if value is None or not callable(value):
                errors.append(f"{where}: no function or class '{name}' found")
                continue
            checked += 1
            errors += argument_errors(where, arguments, callable_parameters(value))
            if then is not None:
                if then != "__call__" and not hasattr(value, then):
                    errors.append(f"{where}: '{name}' has no method '{then}'")
                    continue
                errors += argument_errors(f"{where} ({then})", then_arguments, callable_parameters(value, then))
    return errors, checked


@pytest.fixture(scope="module")
def modules():
    pytest.importorskip("fastapi")  # serving/app.py
    pytest.importorskip("onnxruntime")  # deploy/runtime.py
    return package_modules()


def test_every_call_in_the_contract_tables_exists_with_the_listed_arguments(modules):
    errors, checked = contract_errors(DOC.read_text(encoding="utf-8"), modules)
    assert not errors, "docs/tensor_contracts.md drifts from the code:\n" + "\n".join(errors)
    assert checked >= 150  # the tables were read, not skipped


MADE_UP = """
## CIF (`models/cif.py`), `CifPredictor(d_model, kernel_size, threshold, tail_threshold)`

The predictor is `CifPredictor`.

| Function | Input |
|---|---|
| `cif_integrate(hidden, alphas, num_tokens)` | right |
| `cif_integrate(hidden, weights, alphas, num_tokens)` | a parameter that does not exist |
| `cif_integrate(alphas, hidden, num_tokens)` | out of order |
| `cif_integrate(hidden, alphas)` | a parameter left out |
| `resample(waveform, orig_sample_rate, new_sample_rate)` (`data/resample.py`) | keyword-only parameters left out |
| `fit_alpha_scale(alpha_sums, target_lengths)` / `inference_token_count(alphas, tail_threshold=0.5)` | right |
| `no_such_function(x)` | missing |
| `CifPredictor(d_model, kernel_size=3, threshold=1.0, tail_threshold=0.5)(hidden, mask, target_lengths=None)` | right |
| `CifPredictor(d_model, kernel_size, threshold, tail_threshold)(hidden, mask, target_lengths, padding)` | |
| `predict_alphas(hidden, mask) -> alphas [B, T]` | a method of the section's class, right |
| `CifPredictor.predict_alphas(hidden, mask, extra)` | one too many |
| `CifPredictor.predict_alphas(hidden, ...)` | an ellipsis in place of a parameter |
| `assert_shape(tensor, "B,T", name, dims)` (`checks.py`) | a literal in its position, right |
| `alphas` | not a call: skipped |
"""


def test_the_checker_finds_each_kind_of_drift_and_passes_right_rows(modules):
    errors, checked = contract_errors(MADE_UP, modules)
    assert checked == 14
    assert len(errors) == 8, errors
    assert "line 9: `cif_integrate(hidden, weights, alphas, num_tokens)`: 'weights' is not a parameter" in errors[0]
    assert "line 10: `cif_integrate(alphas, hidden, num_tokens)`: 'hidden' is listed out of the code's order" \
        in errors[1]
    assert "line 11: `cif_integrate(hidden, alphas)`: leaves out num_tokens" in errors[2]
    assert "line 12" in errors[3] and "leaves out zero_crossings, rolloff, window, kaiser_beta" in errors[3]
    assert "no function or class 'no_such_function' found" in errors[4]
    assert "line 16" in errors[5] and "(__call__): 'padding' is not a parameter" in errors[5]
    assert "line 18" in errors[6] and "'extra' is not a parameter" in errors[6]
    assert "line 19" in errors[7] and "'...' stands in for mask; list every parameter" in errors[7]


def test_calls_are_parsed_with_nested_defaults_literals_and_chained_calls():
    assert parse_call('f(a, b=(1, 2), c="x,y") -> [B]') == ("f", ["a", "b=(1, 2)", 'c="x,y"'], None, None)
    assert parse_call("Trainer(cfg, run: RunFolder).fit() -> Path") == ("Trainer", ["cfg", "run: RunFolder"], "fit",
                                                                       [])
    assert parse_call("Spec(x=1)(features, generator)") == ("Spec", ["x=1"], "__call__", ["features", "generator"])
    assert parse_call("vocab_size") is None
