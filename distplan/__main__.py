"""``python -m distplan``: the main job (same flags as ``python solve.py``)."""
import sys

from distplan.core.interrupt import exit_early_on_signals, exit_quietly_on_signals

exit_early_on_signals()   # a Ctrl-C/SIGTERM during the imports: one line, 130/143
from distplan.cli.main import main  # noqa: E402

rc = main(prog="python -m distplan")
exit_quietly_on_signals(rc)
sys.exit(rc)
