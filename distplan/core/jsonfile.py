"""Reading a JSON document a user named: every way the file can be wrong is one
DistplanError naming the file and what kind of file it should be."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from distplan.core.errors import DistplanError


def read_json_file(path: str | Path, what: str) -> Any:
    """Parse the JSON file at ``path``; ``what`` names it in errors ("plan file")."""
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
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
    except json.JSONDecodeError as e:
        raise DistplanError(f"{what} {str(p)!r} is not valid JSON: {e}") from None
    except ValueError as e:   # e.g. an integer of more than 4300 digits
        raise DistplanError(f"{what} {str(p)!r} is not valid JSON: {str(e)[:200]}") from None
