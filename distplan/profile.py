"""``python -m distplan.profile MODEL --device cpu``: per-op measured times of a torch
module on this machine, written as a ``distplan-profile`` (see distplan/cli/profile.py)."""
from __future__ import annotations

import sys

if __name__ == "__main__":
    from distplan.cli.profile import main

    sys.exit(main())
