"""``python -m distplan.studies``: an entry shim for ``distplan.cli.studies`` (the
command line lives in the cli layer; the layer contract ignores this one import)."""
import sys

from distplan.cli.studies import main

sys.exit(main())
