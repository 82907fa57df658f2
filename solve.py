"""distplan from a source checkout: ``python solve.py --topology mcm4x4``.

The same command as ``python -m distplan`` (see ``distplan.cli.main``): load a workload
and a topology, solve the MILP, re-rank the plans in the simulator, report, write the
winner."""
import sys

from distplan.core.interrupt import exit_early_on_signals, exit_quietly_on_signals

if __name__ == "__main__":
    exit_early_on_signals()   # a Ctrl-C/SIGTERM during the imports: one line, 130/143

from distplan.cli.main import main  # noqa: E402

if __name__ == "__main__":
    rc = main()
    exit_quietly_on_signals(rc)
    sys.exit(rc)
