"""strata: how fast a network trains on a cluster under a parallelization strategy.

The same questions as the `strata` command line, answered by the same code
(docs/python.md). Every function returns plain Python objects:

- ``predict``, ``simulate``, ``describe`` and ``presets``: a dict, the JSON
  the command writes with ``--format json``;
- ``compare``, ``sweep`` and ``search``: a list of flat dicts, the columns of
  ``--format csv``, which ``pandas.DataFrame`` takes as they are.

Every number carries its unit in its key (``step_s``, ``memory_bytes_per_worker``).
Options are keywords named like the keys of an experiment file
(``fc_update="round"``, ``tp=2``, ``overlap=False``). A mistake raises
``strata.Error`` (a ValueError) with the CLI's one-line message;
``strata.ConfigError`` adds the file, line and key.

    >>> import strata
    >>> strata.predict("alexnet-owt", "k20x8-pcie", "owt-b", 8, fc_update="round")["step_s"]
"""

from ._strata import (  # noqa: F401  (the module's interface)
    Cluster,
    ConfigError,
    Error,
    Network,
    RunFailure,
    compare,
    describe,
    load_cluster,
    load_network,
    predict,
    presets,
    search,
    set_limits,
    simulate,
    sweep,
)

import os as _os

from ._strata import _set_builtin_configs

# A wheel (python/make_wheel.py) carries the presets in strata/configs beside
# the module: they are the built-in ones wherever pip installed it.
_CONFIGS = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "configs")
if _os.path.isdir(_CONFIGS):
    _set_builtin_configs(_CONFIGS)

__all__ = [
    "Cluster",
    "ConfigError",
    "Error",
    "Network",
    "RunFailure",
    "compare",
    "describe",
    "load_cluster",
    "load_network",
    "predict",
    "presets",
    "search",
    "set_limits",
    "simulate",
    "sweep",
]
