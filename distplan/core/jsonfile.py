"""Reading a JSON document a user named: every way the file can be wrong is one
DistplanError naming the file and what kind of file it should be. Strict JSON: a key
twice in one object, or the non-JSON literals NaN/Infinity, are refused (they would be
read as "last wins" or as a number no plan or graph can hold)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from distplan.core.errors import DistplanError


class _Refused(ValueError):
    """A strict-JSON rule broken while parsing (the message says which)."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k, v in pairs:
        if k in d:
            raise _Refused(f"key {k!r} appears twice in one object; keep one")
        d[k] = v
    return d


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number; write a finite number")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise _Refused(f"{text[:40]} is too large for a number (it reads as infinity)")
    return x


def loads_strict(text: str) -> Any:
    """``json.loads`` that refuses duplicate keys and NaN/Infinity (raises ValueError)."""
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant,
                      parse_float=_finite_float)


def read_json_file(path: str | Path, what: str) -> Any:
    """Parse the JSON file at ``path``; ``what`` names it in errors ("plan file")."""
    p = Path(path)
    try:
        return loads_strict(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DistplanError(f"{what} {str(p)!r} not found") from None
    except IsADirectoryError:
        raise DistplanError(f"{what} {str(p)!r} is a directory, not a file") from None
    except UnicodeDecodeError:
        raise DistplanError(f"{what} {str(p)!r} is not UTF-8 text (is it a {what.split()[0]} JSON file?)") from None
    except OSError as e:
        raise DistplanError(f"{what} {str(p)!r} cannot be read: {e.strerror or e}") from None
    except RecursionError:
        raise DistplanError(f"{what} {str(p)!r} is nested too deeply to be a {what.split()[0]}") from None
    except _Refused as e:
        raise DistplanError(f"{what} {str(p)!r} is not valid JSON: {e}") from None
    except json.JSONDecodeError as e:
        raise DistplanError(f"{what} {str(p)!r} is not valid JSON: {e}") from None
    except ValueError as e:   # e.g. an integer of more than 4300 digits
        raise DistplanError(f"{what} {str(p)!r} is not valid JSON: {str(e)[:200]}") from None
