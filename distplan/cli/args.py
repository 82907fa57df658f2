"""Argument parsing shared by the command lines: one ``error:`` line for bad flags,
finite numbers only, and output paths checked before any work starts."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

from distplan.core.atomic import file_identity
from distplan.core.errors import DistplanError


_UNSET = object()   # a default no command line can give: what parse_args was not given


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one ``error:`` line and exit status 2, and whose
    namespace knows which flags the command line gave (:func:`given`), defaults aside."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        ns = super().parse_args(args, namespace)
        saved = [(a, a.default) for a in self._actions if a.default is not argparse.SUPPRESS]
        try:   # parse again with defaults nobody can type: what is not one was given
            for a, _ in saved:
                a.default = None if isinstance(a, argparse._AppendAction) else _UNSET
            again = super().parse_args(args)
        finally:
            for a, d in saved:
                a.default = d
        ns._given = frozenset(k for k, v in vars(again).items() if v is not _UNSET and v is not None)
        return ns


def given(args: argparse.Namespace, flag: str) -> bool:
    """Did the command line give ``flag`` (``--seq-len``), whatever its value?"""
    return flag.lstrip("-").replace("-", "_") in getattr(args, "_given", frozenset())


def refuse_flags(args: argparse.Namespace, flags: tuple[str, ...] | list[str], why: str) -> None:
    """The one rule for flags that do not apply: the first of ``flags`` the command line
    gave is a DistplanError naming it and ``why`` ("with a plan file: the plan fixes it")."""
    for flag in flags:
        if given(args, flag):
            raise DistplanError(f"{flag} does not apply {why}; leave it out")


def finite_float(text: str) -> float:
    """A float flag: finite (no nan or inf)."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return x


def check_output_file(path: str | None, flag: str) -> None:
    """``path`` can be written as a file: its folder exists and is writable, and it is
    not itself a folder. Raises DistplanError naming the flag."""
    if not path:
        return
    p = Path(path)
    try:
        if p.is_dir():
            raise DistplanError(f"{flag} {path!r} is a folder; give a file name")
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise DistplanError(f"{flag} {path!r}: folder {str(parent)!r} does not exist")
        if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise DistplanError(f"{flag} {path!r} is not writable")
    except OSError as e:   # a name over 255 bytes, a loop of links, ...
        raise DistplanError(f"{flag} {path!r} cannot be written: {e.strerror or e}") from None
    except ValueError as e:   # an embedded NUL
        raise DistplanError(f"{flag} {path!r} cannot be written: {e}") from None


def check_output_folder(path: str | None, flag: str) -> None:
    """``path`` is, or can be made as, a writable folder."""
    if not path:
        return
    p = Path(path)
    try:
        if p.exists() and not p.is_dir():
            raise DistplanError(f"{flag} {path!r} is a file; give a folder")
        existing = p
        while not existing.exists():
            existing = existing.parent
        if not existing.is_dir() or not os.access(existing, os.W_OK):
            raise DistplanError(f"{flag} {path!r} cannot be created: {str(existing)!r} is not a writable folder")
    except OSError as e:
        raise DistplanError(f"{flag} {path!r} cannot be used: {e.strerror or e}") from None
    except ValueError as e:
        raise DistplanError(f"{flag} {path!r} cannot be used: {e}") from None


def _where(path: str) -> tuple[int, int] | str:
    """What a path names: (device, inode) of the file there, else its absolute path."""
    ident = file_identity(path)
    return ident if ident is not None else os.path.realpath(path)


def check_distinct(inputs: list[tuple[str, str | None]], outputs: list[tuple[str, str | None]]) -> None:
    """Every output names a file of its own: none is an input (compared by device and
    inode, so a hard or symbolic link to an input counts as the input) nor another output.
    Each entry is (flag, path); a None path is left out. Raises DistplanError naming both."""
    outs = [(f, p, _where(p)) for f, p in outputs if p]
    ins = [(f, p, file_identity(p)) for f, p in inputs if p]
    for fo, po, wo in outs:
        for fi, pi, wi in ins:
            if wi is not None and wo == wi:
                raise DistplanError(f"{fo} {po!r} is the same file as {fi} {pi!r} and would overwrite it; "
                                    f"give {fo} another file name")
    for i, (fa, pa, wa) in enumerate(outs):
        for fb, pb, wb in outs[i + 1:]:
            if wa == wb:
                raise DistplanError(f"{fa} {pa!r} and {fb} {pb!r} name the same file; give each its own")


def io_error(e: OSError) -> str:
    """The ``error:`` line's text for an OSError while writing (a file, or the output)."""
    where = f"{e.filename!r}" if e.filename else "the standard output"
    return f"cannot write {where}: {e.strerror or e}"


def _writable_fd(fd: int) -> bool:
    """Is ``fd`` open for writing (not closed, not some file opened read-only in its place)?"""
    try:
        import fcntl

        return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY
    except ImportError:   # not Unix: open is enough
        try:
            os.fstat(fd)
            return True
        except OSError:
            return False
    except OSError:
        return False


def ensure_std_streams() -> None:
    """A standard stream closed at start (``>&-``, ``2>&-``: Python then has None or a
    stream on a dead descriptor, and the solver's output capture fails on it) is opened
    on /dev/null, so that writing to it is no error and no file distplan opens later
    takes descriptor 1 or 2."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if _writable_fd(fd) and getattr(sys, name) is not None:
            continue
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "w", closefd=False))
        except OSError:
            pass


def flush_stdout() -> str | None:
    """Flush standard output; on failure (disk full, closed) say why and point it at
    /dev/null, so that the interpreter's own flush at exit cannot print a traceback. A
    reader that went away (``| head``) is no error."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
        return None
    except OSError as e:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        return None if isinstance(e, BrokenPipeError) else io_error(e)


def process_started_at() -> float:
    """When this process started, on the time.perf_counter scale (Linux: /proc/self/stat;
    elsewhere, or if that cannot be read: now). A command line's time limit counts from
    there, its imports included."""
    now = time.perf_counter()
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")   # field 22: start time in clock ticks
    except (OSError, ValueError, IndexError):
        return now
    return now - age if 0 <= age < 60 else now   # a long-lived process (a notebook) counts from now
