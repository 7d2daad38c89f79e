"""The algorithms, one module each, found by name: the registry every caller asks.

A module of this package named like an algorithm (``minhash.py`` for ``NEARDUP_ALGORITHM = "minhash"``)
defines one :class:`~.base.Algorithm` subclass with that ``name``; nothing else needs to know it exists. The
configuration, the CLI and the docs' check read the names from here, and each class carries its defaults,
the thresholds it serves and how it is built from the settings. Adding an algorithm is writing one module.

Listing the names imports nothing (reading settings stays light: no numpy to print ``--version``); a class
is imported when it is asked for.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Algorithm

#: The algorithm a crawl uses unless told otherwise.
DEFAULT_ALGORITHM = "minhash"
#: How MinHash draws its minima, by stored name (``NEARDUP_MINHASH_SKETCH``): one permutation with
#: densification (the default), or Broder's ``num_perm`` independent permutations.
MINHASH_SKETCH_NAMES = ("one-permutation", "permutations")
#: Modules of this package that are not algorithms.
_NOT_ALGORITHMS = frozenset({"base"})


def algorithm_names() -> tuple[str, ...]:
    """Every algorithm's name: the default first, then alphabetical."""
    names = [m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_ALGORITHMS]
    return tuple(sorted(names, key=lambda name: (name != DEFAULT_ALGORITHM, name)))


def algorithm_class(name: str) -> type[Algorithm]:
    """The class of the algorithm called ``name`` (a ``KeyError`` for a name that is none)."""
    from .base import Algorithm

    if name not in algorithm_names():
        raise KeyError(name)
    module = importlib.import_module(f"{__name__}.{name}")
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, Algorithm) and getattr(value, "name", None) == name:
            return value
    raise KeyError(f"the module {module.__name__} defines no algorithm named {name!r}")
