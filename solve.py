"""distplan from a source checkout: ``python solve.py --topology mcm4x4``.

The same command as ``python -m distplan`` (see ``distplan.cli.main``): load a workload
and a topology, solve the MILP, re-rank the plans in the simulator, report, write the
winner."""
import sys

from distplan.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
