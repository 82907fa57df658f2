"""The top layer: command lines. Each parses its flags, calls ``distplan.api`` and prints.

- ``main``: ``python solve.py`` / ``python -m distplan`` / ``distplan``
- ``replay``: ``python -m distplan.sim PLAN.json`` / ``distplan-sim``
"""
