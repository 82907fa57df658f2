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

from distplan.core.errors import DistplanError


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one ``error:`` line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


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
    if p.is_dir():
        raise DistplanError(f"{flag} {path!r} is a folder; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise DistplanError(f"{flag} {path!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise DistplanError(f"{flag} {path!r} is not writable")


def check_output_folder(path: str | None, flag: str) -> None:
    """``path`` is, or can be made as, a writable folder."""
    if not path:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise DistplanError(f"{flag} {path!r} is a file; give a folder")
    existing = p
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise DistplanError(f"{flag} {path!r} cannot be created: {str(existing)!r} is not a writable folder")


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
