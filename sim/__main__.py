"""``python -m distplan.sim PLAN.json``: an entry shim for ``distplan.cli.replay`` (the
command line lives in the cli layer; the layer contract ignores this one import)."""
import sys

from distplan.cli.replay import main

sys.exit(main())
