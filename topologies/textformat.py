"""Read and write YAML or JSON documents with numbers kept exact and duplicate keys refused.

Non-integer numbers are read as ``decimal.Decimal`` (so a unit conversion sees exactly
what the user wrote) and ``Decimal`` values are written as plain number text. YAML
also accepts exponent forms without a dot or exponent sign (``1e9``), which plain
PyYAML would read as strings, and merge keys (``<<: *defaults``). The format follows the
file suffix. Text is UTF-8 (a byte-order mark is dropped) or UTF-16/32 with a byte-order
mark, as Windows editors save it; line endings may be LF, CRLF or CR. YAML is parsed by
libyaml when PyYAML has it (a 4,096-device file in 0.7 s instead of 4 s) and by the pure
Python parser otherwise, and again by the Python parser to word an error (its messages
name the offending character).
"""
from __future__ import annotations

import json
import math
import re
import secrets
from decimal import Decimal, InvalidOperation
from pathlib import Path

import yaml

from distplan.core.atomic import write_atomic
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


MERGE_TAG = "tag:yaml.org,2002:merge"


#: the most nodes a YAML document may hold once its aliases are expanded: a topology
#: of 10,000 devices and their links is ~200,000; an alias bomb (nine aliases of nine
#: aliases ...) expands to billions and hung the reader and every walk of the document
MAX_YAML_NODES = 2_000_000


def _expanded_nodes(root: yaml.Node, limit: int) -> int:
    """How many nodes ``root`` holds with every alias expanded (a node reached twice
    counts twice), counted once per distinct node; stops past ``limit``."""
    size: dict[int, int] = {}
    opened: set[int] = set()   # a node whose children are being counted (a recursive alias: counted once)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in size or (not done and id(node) in opened):
            continue
        opened.add(id(node))
        kids = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if done:
            size[id(node)] = min(limit + 1, 1 + sum(size.get(id(k), 0) for k in kids))
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size and id(k) not in opened)
    return size.get(id(root), 0)


class _NoDuplicates:
    """Refuse a key written twice in one mapping; keys merged in with ``<<`` may be
    overridden, as YAML defines. Refuse a document whose aliases expand past
    ``MAX_YAML_NODES`` nodes before constructing it."""

    def construct_document(self, node):  # noqa: D102
        n = _expanded_nodes(node, MAX_YAML_NODES)
        if n > MAX_YAML_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"its aliases (*name) expand to more than {MAX_YAML_NODES:,} values; write the "
                "values out, or use fewer aliases of aliases", node.start_mark)
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):  # noqa: D102
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
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


class _Loader(_NoDuplicates, yaml.SafeLoader):
    pass


_FAST_LOADERS: list[type] = []
if getattr(yaml, "CSafeLoader", None) is not None:   # libyaml: the same documents, ~6x faster
    class _CLoader(_NoDuplicates, yaml.CSafeLoader):
        pass

    _FAST_LOADERS.append(_CLoader)


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


for _cls in (_Loader, *_FAST_LOADERS):
    _cls.add_implicit_resolver(FLOAT_TAG, _FLOAT_RE, _FLOAT_FIRST)
    _cls.add_constructor(FLOAT_TAG, _construct_float)


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


_BOMS = [(b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe\x00\x00", "utf-32"),
         (b"\xef\xbb\xbf", "utf-8-sig"), (b"\xfe\xff", "utf-16"), (b"\xff\xfe", "utf-16")]


def read_text(path: str | Path) -> str:
    """The text of ``path``: UTF-8 (a byte-order mark dropped) or UTF-16/32 with a
    byte-order mark; anything else is a DistplanError naming the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DistplanError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DistplanError(f"{path}: is a folder, not a file") from None
    except OSError as e:
        raise DistplanError(f"{path}: cannot read: {e.strerror or e}") from None
    if path.is_dir():   # some systems read a folder as empty instead of failing
        raise DistplanError(f"{path}: is a folder, not a file")
    encoding = next((enc for bom, enc in _BOMS if data.startswith(bom)), "utf-8")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        name = encoding.upper().replace("-SIG", "")
        raise DistplanError(f"{path}: not {name} text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                            "save the file as UTF-8") from None


def read_document(path: str | Path) -> object:
    """Parse a YAML or JSON file; any read or syntax problem is a DistplanError naming it.
    An empty file (or one of only comments, in YAML) is an error too."""
    path = Path(path)
    fmt = file_format(path)
    text = read_text(path)
    if not text.strip():
        raise DistplanError(f"{path}: the file is empty")
    if fmt == "json":
        try:
            return json.loads(text, parse_float=Decimal, parse_constant=float,
                              object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as e:
            raise DistplanError(f"{path}: not valid JSON: {e.msg} at line {e.lineno} "
                                f"column {e.colno}{_json_hint(text, e.pos)}") from None
        except ValueError as e:
            raise DistplanError(f"{path}: not valid JSON: {e}") from None
        except RecursionError:
            raise DistplanError(f"{path}: not a topology: nested too deeply") from None
    for loader in (*(_FAST_LOADERS if _shallow(text) else ()), _Loader):
        try:
            doc = yaml.load(text, Loader=loader)  # noqa: S506 - SafeLoader subclasses
        except yaml.YAMLError as e:
            if loader is not _Loader:
                continue   # the Python parser words the error (it names the character)
            raise DistplanError(f"{path}: not valid YAML: {_yaml_problem(e)}{_yaml_hint(text, e)}") from None
        except RecursionError:
            raise DistplanError(f"{path}: not a topology: nested too deeply") from None
        except ValueError as e:   # a constructor's own error, e.g. an integer of more than 4300 digits
            raise DistplanError(f"{path}: not valid YAML: {str(e)[:200]}") from None
        if doc is None:
            raise DistplanError(f"{path}: the file holds no document (only comments)")
        return doc
    raise AssertionError("unreachable")   # pragma: no cover - the Python loader returns or raises


#: libyaml's parser recurses without a guard: a document nested ~50,000 deep crashes the
#: process (20,000 parse). Text within these bounds nests at most a few thousand deep (a
#: block level takes a column, a flow level a bracket) and goes to it; other text to the
#: Python parser, which says "nested too deeply".
MAX_FAST_LINE = 2000
MAX_FAST_FLOW_DEPTH = 2000


def _shallow(text: str) -> bool:
    """Whether ``text`` surely nests shallowly enough for libyaml (brackets inside quoted
    strings count too: that only sends a file to the slower parser)."""
    if max(map(len, text.splitlines()), default=0) > MAX_FAST_LINE:
        return False
    depth = 0
    for m in _BRACKETS.finditer(text):
        depth += 1 if m[0] in "[{" else -1
        if depth > MAX_FAST_FLOW_DEPTH:
            return False
    return True


_BRACKETS = re.compile(r"[\[\]{}]")


def _json_hint(text: str, pos: int) -> str:
    """A likely cause of a JSON syntax error at ``pos``, as a '; ...' suffix (or '')."""
    rest = text[pos:].lstrip()
    before = text[:pos].rstrip()
    if rest.startswith(("//", "/*", "#")):
        return "; JSON has no comments (a .yaml file may have '#' comments)"
    if before.endswith(",") and rest[:1] in ("}", "]"):
        return "; remove the trailing comma"
    if rest.startswith("'"):
        return "; JSON strings take double quotes"
    if pos == 0 or not text.lstrip().startswith(("{", "[")):
        try:
            if isinstance(yaml.load(text, Loader=_Loader), dict):  # noqa: S506
                return "; this looks like YAML: name the file .yaml"
        except (yaml.YAMLError, ValueError, RecursionError):
            pass
    return ""


def _yaml_hint(text: str, e: yaml.YAMLError) -> str:
    if isinstance(e, yaml.MarkedYAMLError) and "'\\t'" in str(e.problem):
        return "; YAML indents with spaces, not tabs"
    if isinstance(e, yaml.MarkedYAMLError) and "another document" in str(e.problem):
        return "; a topology file holds one document: remove the '---' line"
    return ""


def _yaml_problem(e: yaml.YAMLError) -> str:
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        # a context such as 'expected a single document in the stream' helps; 'while
        # scanning a block mapping' (with a line of its own) does not
        context = e.context if e.context and not e.context.startswith("while") else None
        what = ", ".join(x for x in (context, e.problem) if x) or e.context or ""
        return " ".join(f"{what}{where}".split())
    return " ".join(str(e).split())   # e.g. a ReaderError spans two lines


def write_document(doc: object, path: str | Path) -> None:
    """Write ``doc`` (dicts, lists, str, int, bool, Decimal, Flow) as YAML or JSON."""
    path = Path(path)
    text = dump_yaml(doc) if file_format(path) == "yaml" else dump_json(doc)
    write_atomic(path, text, "topology file")


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
