"""``python -m distplan.sim PLAN.json``: an entry shim for ``distplan.cli.replay`` (the
command line lives in the cli layer; the layer contract ignores this one import)."""
import sys

from distplan.core.interrupt import exit_early_on_signals, exit_quietly_on_signals

exit_early_on_signals()   # a Ctrl-C/SIGTERM during the imports: one line, 130/143
from distplan.cli.replay import main  # noqa: E402

rc = main()
exit_quietly_on_signals(rc)
sys.exit(rc)
