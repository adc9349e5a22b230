"""The engine: one run specification (`RunSpec`) that every way of running ragframe executes.

It owns what a run is asked to do and which path can do it; it imports the errors only, so
every layer above (the run itself, the command line, Ray) can use it.
"""

from ragframe.engine.spec import PATHS, RunSpec, refuse_unsupported

__all__ = ["PATHS", "RunSpec", "refuse_unsupported"]
