"""Read and write YAML or JSON documents with numbers kept exact and duplicate keys refused.

Non-integer numbers are read as ``decimal.Decimal`` (so a unit conversion sees exactly
what the user wrote) and ``Decimal`` values are written as plain number text. YAML
also accepts exponent forms without a dot or exponent sign (``1e9``), which plain
PyYAML would read as strings. The format follows the file suffix.
"""
from __future__ import annotations

import json
import math
import re
import secrets
from decimal import Decimal, InvalidOperation
from pathlib import Path

import yaml

from distplan.core.errors import DistplanError
from distplan.core.units import number_text

FLOAT_TAG = "tag:yaml.org,2002:float"
INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_RE = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?
        |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_FLOAT_FIRST = list("-+0123456789.")
YAML_SUFFIXES = (".yaml", ".yml")
JSON_SUFFIXES = (".json",)


class Flow(dict):
    """A mapping written on one line in YAML (``{a: 1, b: 2}``)."""


class _Loader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):  # noqa: D102 - refuse duplicate keys
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    dup = key in seen
                    seen.add(key)
                except TypeError:
                    continue
                if dup:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep)


def _construct_float(loader: yaml.SafeLoader, node: yaml.Node) -> object:
    text = loader.construct_scalar(node).replace("_", "")
    low = text.lower()
    if low.endswith(".inf"):
        return -math.inf if low.startswith("-") else math.inf
    if low == ".nan":
        return math.nan
    try:
        return Decimal(text)
    except InvalidOperation:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not a number", node.start_mark) from None


_Loader.add_implicit_resolver(FLOAT_TAG, _FLOAT_RE, _FLOAT_FIRST)
_Loader.add_constructor(FLOAT_TAG, _construct_float)


class _Dumper(yaml.SafeDumper):
    pass


def _represent_decimal(dumper: yaml.SafeDumper, d: Decimal) -> yaml.Node:
    text = number_text(d)
    tag = FLOAT_TAG if any(ch in text for ch in ".eE") else INT_TAG
    return dumper.represent_scalar(tag, text)


_Dumper.add_implicit_resolver(FLOAT_TAG, _FLOAT_RE, _FLOAT_FIRST)
_Dumper.add_representer(Decimal, _represent_decimal)
_Dumper.add_representer(Flow, lambda d, v: d.represent_mapping(
    "tag:yaml.org,2002:map", v.items(), flow_style=True))


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def file_format(path: Path) -> str:
    """``"yaml"`` or ``"json"`` from the suffix; anything else is an error."""
    suffix = path.suffix.lower()
    if suffix in YAML_SUFFIXES:
        return "yaml"
    if suffix in JSON_SUFFIXES:
        return "json"
    raise DistplanError(f"{path}: unknown file type {suffix!r}; use .yaml, .yml or .json")


def read_document(path: str | Path) -> object:
    """Parse a YAML or JSON file; any read or syntax problem is a DistplanError naming it."""
    path = Path(path)
    fmt = file_format(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DistplanError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DistplanError(f"{path}: cannot read: {e}") from None
    if fmt == "json":
        try:
            return json.loads(text, parse_float=Decimal, parse_constant=float,
                              object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as e:
            raise DistplanError(f"{path}: not valid JSON: {e.msg} at line {e.lineno} "
                                f"column {e.colno}") from None
        except ValueError as e:
            raise DistplanError(f"{path}: not valid JSON: {e}") from None
        except RecursionError:
            raise DistplanError(f"{path}: not a topology: nested too deeply") from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise DistplanError(f"{path}: not valid YAML: {_yaml_problem(e)}") from None
    except RecursionError:
        raise DistplanError(f"{path}: not a topology: nested too deeply") from None
    except ValueError as e:   # a constructor's own error, e.g. an integer of more than 4300 digits
        raise DistplanError(f"{path}: not valid YAML: {str(e)[:200]}") from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        return " ".join(f"{e.problem or e.context}{where}".split())
    return " ".join(str(e).split())   # e.g. a ReaderError spans two lines


def write_document(doc: object, path: str | Path) -> None:
    """Write ``doc`` (dicts, lists, str, int, bool, Decimal, Flow) as YAML or JSON."""
    path = Path(path)
    text = dump_yaml(doc) if file_format(path) == "yaml" else dump_json(doc)
    path.write_text(text, encoding="utf-8")


def dump_yaml(doc: object) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=100)


def dump_json(doc: object) -> str:
    nonce = secrets.token_hex(4)
    numbers: list[str] = []

    def swap(x: object) -> object:
        if isinstance(x, Decimal):
            numbers.append(number_text(x))
            return f"\x00{nonce}:{len(numbers) - 1}\x00"
        if isinstance(x, dict):
            return {k: swap(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [swap(v) for v in x]
        return x

    text = json.dumps(swap(doc), indent=2, ensure_ascii=False)
    pattern = re.compile(r'"\\u0000' + nonce + r':(\d+)\\u0000"')
    return pattern.sub(lambda m: numbers[int(m[1])], text) + "\n"
