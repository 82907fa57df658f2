"""Writing an output file without ever destroying the one already there: a temporary
file in the same folder, written, flushed and fsynced, then renamed over the target
(``os.replace``). A write that fails part-way (disk full, ``ulimit -f``, a name too
long) removes the temporary file, leaves the previous file intact and raises one
DistplanError naming the file. A target that exists and is not a regular file (a
device such as /dev/null, a FIFO) is written in place: it cannot be renamed over."""
from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from distplan.core.errors import DistplanError


def _umask() -> int:
    """The process's umask (Linux: read, not changed; elsewhere: set and restored)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def _cannot(what: str, path: str | Path, e: OSError) -> DistplanError:
    return DistplanError(f"cannot write {what} {str(path)!r}: {_why(e)}; the file there before, if any, is "
                         "unchanged")


@contextmanager
def atomic_open(path: str | Path, what: str = "output file", binary: bool = False) -> Iterator[IO[Any]]:
    """A file object for ``path`` (text UTF-8, or ``binary``) whose content replaces the
    file at ``path`` only when the block ends without error (module docstring). Any
    OSError, inside the block or in the rename, becomes a DistplanError naming
    ``what`` and ``path``; any other exception propagates, and the target is untouched."""
    target = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise _cannot(what, path, e) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise DistplanError(f"cannot write {what} {str(path)!r}: it is a folder; give a file name")
    if st is not None and not stat.S_ISREG(st.st_mode):
        with _in_place(target, what, path, binary) as f:
            yield f
        return
    folder = target.parent if str(target.parent) else Path(".")
    stem = target.name.encode()[:60].decode(errors="ignore")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{stem}.", suffix=".tmp")
    except OSError as e:
        raise _cannot(what, path, e) from None
    try:
        try:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
            with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as e:
            raise _cannot(what, path, e) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_folder(folder)


@contextmanager
def _in_place(target: Path, what: str, path: str | Path, binary: bool) -> Iterator[IO[Any]]:
    """Write a device or FIFO in place (a FIFO without a reader is refused, not waited on)."""
    try:
        fd = os.open(target, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except OSError as e:
        raise _cannot(what, path, e) from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
    except OSError as e:
        raise _cannot(what, path, e) from None


def _sync_folder(folder: Path) -> None:
    """fsync the folder so the rename itself survives a crash (best effort)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | Path, data: str | bytes, what: str = "output file") -> None:
    """Replace the file at ``path`` by ``data`` atomically (module docstring)."""
    with atomic_open(path, what, binary=isinstance(data, bytes)) as f:
        f.write(data)


def dumps_json(obj: Any, what: str = "JSON document", **kw: Any) -> str:
    """``json.dumps`` that refuses nan and inf (not JSON; readers choke on them) with a
    DistplanError naming ``what``, rather than writing ``NaN``/``Infinity``."""
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError as e:
        if "Out of range float" not in str(e):
            raise
        raise DistplanError(f"{what} holds a value that is not a finite number ({_first_non_finite(obj)}); "
                            "JSON has no nan or infinity, so it was not written") from None


def _first_non_finite(obj: Any, where: str = "") -> str:
    """Where the first nan/inf in ``obj`` sits, as a key path (``problem.seq_len``)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return f"{where or 'the value'} = {obj}"
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for k, v in items:
        hit = _first_non_finite(v, f"{where}.{k}" if where else str(k))
        if hit:
            return hit
    return ""


def json_safe(obj: Any) -> Any:
    """``obj`` with every nan/inf float (a figure not there) as None (JSON null)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def write_json_atomic(path: str | Path, obj: Any, what: str = "JSON file", **kw: Any) -> None:
    """``obj`` as strict JSON (no nan/inf), written atomically to ``path``."""
    write_atomic(path, dumps_json(obj, what, **kw), what)


def save_figure(fig: Any, path: str | Path, what: str = "plot", **kw: Any) -> None:
    """``fig.savefig`` (matplotlib) to ``path`` atomically; the format is the suffix's."""
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    with atomic_open(path, what, binary=True) as f:
        fig.savefig(f, format=fmt, **kw)


def file_identity(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path`` (links followed), None when there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


__all__ = ["atomic_open", "write_atomic", "write_json_atomic", "dumps_json", "json_safe", "save_figure", "file_identity"]
