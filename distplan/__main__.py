"""``python -m distplan``: the main job (same flags as ``python solve.py``)."""
import sys

from distplan.cli.main import main

sys.exit(main(prog="python -m distplan"))
