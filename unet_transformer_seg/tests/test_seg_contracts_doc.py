"""docs/tensor_contracts.md is the reader's map of the package; the docstrings are the source. Every function, class or
method the map names with an argument list in a table's first column (`name(arg, other=...)`, `Class.method(arg)`,
`Class(arg).method(arg)`, `Class(arg)(arg)` for `__call__`) must exist in the package and take the arguments listed
(`...` stands for arguments left out); a name without arguments (`logits_to_labels`, `UNet.forward`, `IGNORE_LABEL`)
must exist. The notation table's symbols, one-letter symbols and file names are not names of the package."""

import importlib
import inspect
import pkgutil
import re
from typing import Dict, Iterator, List, Tuple

import unet_transformer_seg

from seg_helpers import PROJECT_DIR

CALL_HEAD = re.compile(r"([A-Za-z_][\w.]*)\(")
BARE_NAME = re.compile(r"[A-Za-z_]\w+(\.[A-Za-z_]\w*)?")
FILE_NAME = re.compile(r"[\w/]+\.(py|onnx|json|yaml|md|pt)")


def first_column_spans(markdown: str) -> Iterator[str]:
    """The backticked spans in the first column of every table row (a `|` inside backticks is not a cell border),
    the notation table (first header cell `Symbol`) left out."""
    previous, in_notation = "", False
    for line in markdown.splitlines():
        starts_table = line.startswith("|") and not previous.startswith("|")
        previous = line
        if starts_table:
            in_notation = line.split("|")[1].strip() == "Symbol"
        if not line.startswith("|") or set(line) <= set("|-: ") or in_notation:
            continue
        cell, in_code = [], False
        for char in line[1:]:
            if char == "`":
                in_code = not in_code
            elif char == "|" and not in_code:
                break
            cell.append(char)
        yield from re.findall(r"`([^`]+)`", "".join(cell))


def _closing(text: str, start: int) -> int:
    """Index of the bracket closing the one at `start`."""
    depth = 0
    for index in range(start, len(text)):
        depth += text[index] in "([{"
        depth -= text[index] in ")]}"
        if depth == 0:
            return index
    raise ValueError(f"unbalanced brackets in `{text}`")


def _top_level_split(arguments: str) -> List[str]:
    parts, depth, current = [], 0, []
    for char in arguments:
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return [part for part in parts if part]


def parse_calls(span: str) -> List[Tuple[str, List[str]]]:
    """`name(a, b=1)` -> [("name", ["a", "b"])]; a constructor followed by `.method(x)` or `(x)` adds
    ("Class.method", ["x"]) or ("Class.__call__", ["x"]). Arguments are kept as written (`...` included)."""
    head = CALL_HEAD.match(span)
    if head is None:
        return []
    name, open_at = head.group(1), head.end() - 1
    close_at = _closing(span, open_at)
    calls = [(name, _top_level_split(span[open_at + 1 : close_at]))]
    rest = span[close_at + 1 :]
    chained = re.match(r"\.([A-Za-z_]\w*)\(", rest) or re.match(r"()\(", rest)
    if chained and "." not in name:
        method_open = chained.end() - 1
        method_close = _closing(rest, method_open)
        calls.append((f"{name}.{chained.group(1) or '__call__'}",
                      _top_level_split(rest[method_open + 1 : method_close])))
    return calls


def package_definitions(package) -> Dict[str, List[object]]:
    """Every function, class and constant (UPPER_CASE) at the top of a module of the package, by name."""
    found: Dict[str, List[object]] = {}
    for module_info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            defined_here = (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__
            if defined_here or (name.isupper() and not callable(value)):  # functions, classes, constants
                found.setdefault(name, []).append(value)
    return found


def _parameters(target) -> List[str]:
    names = list(inspect.signature(target).parameters)
    return names[1:] if names[:1] == ["self"] else names


def _resolve(name: str, definitions: Dict[str, List[object]]) -> List[object]:
    owner, _, attribute = name.partition(".")
    candidates = definitions.get(owner, [])
    if attribute:
        candidates = [getattr(candidate, attribute) for candidate in candidates if hasattr(candidate, attribute)]
    return candidates


def contract_drift(markdown: str, definitions: Dict[str, List[object]]) -> List[str]:
    """One sentence per name the tables list that the package lacks, or per argument it does not take."""
    problems = []
    for span in first_column_spans(markdown):
        if BARE_NAME.fullmatch(span) and not FILE_NAME.fullmatch(span):
            if not _resolve(span, definitions):
                problems.append(f"`{span}`: no {span} in the package")
            continue
        for name, arguments in parse_calls(span):
            candidates = _resolve(name, definitions)
            if not candidates:
                problems.append(f"`{span}`: no {name} in the package")
                continue
            listed = [argument.split("=")[0].strip() for argument in arguments if argument != "..."]
            fitting = [c for c in candidates if set(listed) <= set(_parameters(c))]
            if not fitting:
                parameters = ", ".join(_parameters(candidates[0]))
                unknown = [argument for argument in listed if argument not in _parameters(candidates[0])]
                problems.append(f"`{span}`: {name} takes ({parameters}), not {', '.join(unknown)}")
    return problems


def test_every_function_the_tensor_contracts_name_exists_with_the_arguments_listed():
    markdown = (PROJECT_DIR / "docs" / "tensor_contracts.md").read_text()
    assert len(list(first_column_spans(markdown))) > 100  # the tables were found
    assert contract_drift(markdown, package_definitions(unet_transformer_seg)) == []


def test_the_checker_reports_wrong_names_and_arguments():
    table = "\n".join([
        "| Function | Input |",
        "|---|---|",
        "| `window_step(window, overlap, alignment)`, `padded_size(height, ...)` | a `|` in code |",
        "| `window_step(S, overlap)` | |",
        "| `no_such_function(x)` | |",
        "| `Trainer(cfg).sprint()`, `SegmentationTransform(image_size, ...)(image, mask, rng, extra)` | |",
        "| `Segmenter.native_logits(images, size)` / `SegmentationLoss(name, class_weights=[1, 2])` | |",
        "| `IGNORE_LABEL`, `UNet.forward`, `checks.py`, `model.onnx` | `not_a_call(x)` in another column |",
        "| `UNet.backward`, `logits_to_label` | |",
        "",
        "| Symbol | Meaning |",
        "|---|---|",
        "| `B`, `no_such_symbol` | the notation table is no map of the package |",
    ])
    definitions = package_definitions(unet_transformer_seg)
    assert parse_calls("Class(a, b=[(1, 2), 3])(x)") == [("Class", ["a", "b=[(1, 2), 3]"]), ("Class.__call__", ["x"])]
    assert contract_drift(table, definitions) == [
        "`window_step(S, overlap)`: window_step takes (window, overlap, alignment), not S",
        "`no_such_function(x)`: no no_such_function in the package",
        "`Trainer(cfg).sprint()`: no Trainer.sprint in the package",
        "`SegmentationTransform(image_size, ...)(image, mask, rng, extra)`: SegmentationTransform.__call__ takes "
        "(image, mask, rng), not extra",
        "`UNet.backward`: no UNet.backward in the package",
        "`logits_to_label`: no logits_to_label in the package",
    ]
