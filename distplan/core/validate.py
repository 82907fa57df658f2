"""Argument checks at the API's edge, in one place: ``distplan.problem``, SolveOptions,
SimOptions and the report's methods call these (the CLI reaches them through the same
calls). Each returns the value (normalised where said) or raises one DistplanError that
names the argument, what it got and what it accepts. Strict on purpose: a bool is not a
count (``True`` is 1 to Python), a string is not a number (``"16"``), 2.5 is not a count,
and nan/inf are not settings."""
from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from distplan.core.errors import DistplanError


def _got(value: Any) -> str:
    text = repr(value)
    return f"{text[:60]}..." if len(text) > 60 else text


def _fail(name: str, accepts: str, value: Any) -> DistplanError:
    return DistplanError(f"{name} must be {accepts}, got {_got(value)} ({type(value).__name__})")


def is_int(value: Any) -> bool:
    """A whole number of Python's or numpy's integer types; never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and not _is_np_bool(value)


def _is_np_bool(value: Any) -> bool:
    return isinstance(value, np.bool_)


def check_bool(name: str, value: Any) -> bool:
    """``True`` or ``False`` (numpy's too), nothing else ("no", 0 and 1 are refused)."""
    if isinstance(value, bool):
        return value
    if _is_np_bool(value):
        return bool(value)
    raise _fail(name, "True or False", value)


def check_int(name: str, value: Any, minimum: int | None = 1, *, optional: bool = False) -> int | None:
    """A whole number >= ``minimum`` (default: a positive count); ``optional``: None too."""
    if value is None and optional:
        return None
    if not is_int(value) or (minimum is not None and value < minimum):
        what = "a whole number" if minimum is None else "a positive whole number" if minimum == 1 else \
            f"a whole number >= {minimum}"
        raise _fail(name, what + (" or None" if optional else ""), value)
    return int(value)


def check_float(name: str, value: Any, minimum: float | None = None, *, above: bool = False,
                below: float | None = None, optional: bool = False, none_means: str = "") -> float | None:
    """A finite real number (an int is fine; a bool, a string, nan or inf are not),
    >= ``minimum`` (> with ``above``) and < ``below`` where given; ``optional``: None too
    (``none_means`` says what None does, for the message)."""
    if value is None and optional:
        return None
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and not _is_np_bool(value)
    x = float(value) if ok else math.nan
    if not (ok and math.isfinite(x) and (minimum is None or (x > minimum if above else x >= minimum))
            and (below is None or x < below)):
        what = "a finite number"
        if minimum is not None:
            what += f" {'>' if above else '>='} {minimum:g}"
        if below is not None:
            what += f"{' and' if minimum is not None else ''} < {below:g}"
        if optional:
            what += f", or None{f' ({none_means})' if none_means else ''}"
        raise _fail(name, what, value)
    return x


def check_choice(name: str, value: Any, choices: Iterable[str], *, optional: bool = False) -> str | None:
    """One of ``choices`` (strings); ``optional``: None too."""
    if value is None and optional:
        return None
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        raise _fail(name, "one of " + ", ".join(repr(c) for c in options) + (" or None" if optional else ""), value)
    return value


def check_str(name: str, value: Any, *, optional: bool = False) -> str | None:
    """A string; ``optional``: None too."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise _fail(name, "a string" + (" or None" if optional else ""), value)
    return value


def check_callable(name: str, value: Any, what: str = "a function", *, optional: bool = True) -> Callable | None:
    """Something callable (``what`` says which call, for the message); None too."""
    if value is None and optional:
        return None
    if not callable(value):
        raise _fail(name, f"{what}{' or None' if optional else ''}", value)
    return value


def check_ints(name: str, value: Any, minimum: int = 1, *, optional: bool = False) -> tuple[int, ...] | None:
    """A list or tuple of whole numbers >= ``minimum`` (as a tuple); ``optional``: None too."""
    if value is None and optional:
        return None
    if not isinstance(value, (list, tuple)) or not all(is_int(v) and v >= minimum for v in value):
        raise _fail(name, f"a list of whole numbers >= {minimum}" + (" or None" if optional else ""), value)
    return tuple(int(v) for v in value)


def check_path(name: str, value: Any, what: str = "a file name") -> Any:
    """A file or folder name: a non-empty str or ``os.PathLike`` without a NUL byte (an
    open file, a number or None is refused; the OS refuses a NUL with a ValueError)."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str) or not text or "\0" in text:
        why = " (it holds a NUL byte)" if isinstance(text, str) and "\0" in text else ""
        raise DistplanError(f"{name} must be {what} (a str or pathlib.Path){why}, got {_got(value)} "
                            f"({type(value).__name__})")
    return value


def check_instance(name: str, value: Any, cls: type, hint: str = "") -> Any:
    """An instance of ``cls``; ``hint`` says how to get one (``"build it with ..."``)."""
    if not isinstance(value, cls):
        raise DistplanError(f"{name} must be a {cls.__name__}, got {_got(value)} ({type(value).__name__})"
                            + (f"; {hint}" if hint else ""))
    return value


__all__ = ["check_bool", "check_int", "check_float", "check_choice", "check_str", "check_callable",
           "check_ints", "check_instance", "check_path", "is_int"]
