"""docs/tensor_contracts.md is the reader's map of the package; the docstrings are the source. Every function, class or
method the map names in a table's first column with an argument list (`name(arg, other=...)`, `Class.method(arg)`,
`Class(arg).method(arg)`, `Class(arg)(arg)` for `__call__`) must exist in the package and take the arguments listed,
and the map must list every parameter it takes (`*args` as `*args`): in one entry, or spread over several entries of the
same name (`...` marks arguments an entry leaves to another). A callable named without arguments (`UNet.forward`) needs
an entry with them; a constant (`IGNORE_LABEL`) need only exist. The notation table's symbols, one-letter symbols and
file names are not names of the package."""

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
    """One sentence per name the tables list that the package lacks, per argument it does not take, then per
    callable whose parameters the tables leave out (all its entries together)."""
    problems = []
    listed_by_name: Dict[str, set] = {}  # every argument the entries of a callable list, in order of appearance
    for span in first_column_spans(markdown):
        if BARE_NAME.fullmatch(span) and not FILE_NAME.fullmatch(span):
            candidates = _resolve(span, definitions)
            if not candidates:
                problems.append(f"`{span}`: no {span} in the package")
            elif any(callable(candidate) for candidate in candidates):
                listed_by_name.setdefault(span, set())
            continue
        for name, arguments in parse_calls(span):
            candidates = _resolve(name, definitions)
            if not candidates:
                problems.append(f"`{span}`: no {name} in the package")
                continue
            listed = [argument.split("=")[0].strip().lstrip("*") for argument in arguments if argument != "..."]
            listed_by_name.setdefault(name, set()).update(listed)
            fitting = [c for c in candidates if set(listed) <= set(_parameters(c))]
            if not fitting:
                parameters = ", ".join(_parameters(candidates[0]))
                unknown = [argument for argument in listed if argument not in _parameters(candidates[0])]
                problems.append(f"`{span}`: {name} takes ({parameters}), not {', '.join(unknown)}")
    for name, listed in listed_by_name.items():
        candidates = [c for c in _resolve(name, definitions) if callable(c)]
        missing = min(([p for p in _parameters(c) if p not in listed] for c in candidates), key=len)
        if missing:
            closest = next(c for c in candidates if [p for p in _parameters(c) if p not in listed] == missing)
            problems.append(f"{name}({', '.join(_parameters(closest))}): the map lists no {', '.join(missing)}")
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
        "| `MultiHeadAttention(dim, num_heads, dropout, impl).sprint()`, "
        "`BatchAugment(settings)(images, masks, rng, extra)` | |",
        "| `gaussian_importance(window, device)` / `SegmentationLoss(name, class_weights=[1, 2])` | |",
        "| `SegmentationLoss(..., dice_include_background)`, `padded_size(..., width, window)` | completes the above |",
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
        "`MultiHeadAttention(dim, num_heads, dropout, impl).sprint()`: no MultiHeadAttention.sprint in the package",
        "`BatchAugment(settings)(images, masks, rng, extra)`: BatchAugment.__call__ takes (images, masks, rng), "
        "not extra",
        "`UNet.backward`: no UNet.backward in the package",
        "`logits_to_label`: no logits_to_label in the package",
        # the parameters no entry lists: padded_size's alignment, UNet.forward's x (a callable named bare)
        "padded_size(height, width, window, alignment): the map lists no alignment",
        "UNet.forward(x): the map lists no x",
    ]
