"""The contract every near-duplicate algorithm follows: text -> (signature bytes, bucket keys), and a
similarity of two signatures.

Each algorithm names the parameters that define its fingerprints (:meth:`Algorithm.params`); the store
records them and refuses to mix fingerprints made with others.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from ..text import fmix64, token_hashes


class NoWords(ValueError):
    """The text has fewer words than one shingle needs (none at all: only punctuation, symbols, emoji,
    invisible characters). Such texts would all share one empty fingerprint and so match each other with
    similarity 1.0; they are skipped, never compared."""


#: A letter or digit of any script (a word character that is not the connector ``_``).
_ALPHANUMERIC = re.compile(r"[^\W_]")


def words(text: str, shingle_size: int = 1) -> np.ndarray:
    """The token hashes of ``text``, raising :class:`NoWords` when it has no letter or digit at all (runs
    of ``_`` are tokens, but not words) or fewer tokens than ``shingle_size`` (at least one). The search
    for a letter stops at the first one, a few characters into any real text."""
    if _ALPHANUMERIC.search(text) is None:
        raise NoWords("no letter or digit")
    hashes = token_hashes(text)
    if len(hashes) < max(1, shingle_size):
        raise NoWords(f"{len(hashes)} words, fewer than the {max(1, shingle_size)} a fingerprint needs")
    return hashes


@dataclass(frozen=True)
class Fingerprint:
    signature: bytes
    buckets: np.ndarray  # int64 bucket keys, one per band or table


class SettingProblem(ValueError):
    """A setting (or a combination) an algorithm cannot serve: the setting's name, its value and what is
    allowed, for the configuration to turn into its one-line start-up error."""

    def __init__(self, name: str, value: Any, allowed: str) -> None:
        super().__init__(f"{name} = {value!r} is not allowed: {allowed}")
        self.name, self.value, self.allowed = name, value, allowed


class AlgorithmSettings(Protocol):
    """What an algorithm is built from (the parsed ``NEARDUP_*`` settings: the crawl's and the CLI's
    ``Config`` has these attributes). A Protocol, so that the engine does not import the configuration."""

    @property
    def algorithm(self) -> str: ...
    @property
    def threshold(self) -> float: ...
    @property
    def shingle_size(self) -> int: ...
    @property
    def minhash_num_perm(self) -> int: ...
    @property
    def minhash_seed(self) -> int: ...
    @property
    def minhash_sketch(self) -> str: ...
    @property
    def simhash_max_distance(self) -> int | None: ...
    @property
    def simhash_blocks(self) -> int | None: ...
    @property
    def imatch_lexicon(self) -> str | None: ...


class Algorithm(ABC):
    """One near-duplicate method: text -> :class:`Fingerprint` (signature bytes and the bucket keys it is
    filed and looked up under), and the similarity of two signatures.

    The class also says how the settings serve it (the registry, :mod:`scrapy_neardup.engine.algorithms`,
    finds it by :attr:`name`): its default threshold and shingle size, which thresholds it can serve
    (:meth:`check_threshold`), and how it is built (:meth:`from_settings`). Nothing about an algorithm is
    written anywhere else.

    ``NEARDUP_THRESHOLD`` means one thing for every algorithm that takes one: the Jaccard similarity of the
    pages' shingle sets (SimHash maps it to a Hamming distance).
    """

    name: ClassVar[str]
    threshold: float
    #: The threshold when none is set; for an algorithm with :attr:`FIXED_THRESHOLD`, its only one.
    DEFAULT_THRESHOLD: ClassVar[float] = 0.45
    #: Whether the threshold is fixed by the algorithm's structure (``NEARDUP_THRESHOLD`` must stay None).
    FIXED_THRESHOLD: ClassVar[bool] = False
    #: Whether 1.0 is refused: LSH bands are tuned for a threshold below 1.
    BANDED: ClassVar[bool] = False
    #: Words per shingle when ``NEARDUP_SHINGLE_SIZE`` is None.
    DEFAULT_SHINGLE_SIZE: ClassVar[int] = 2
    #: Parameters that shape only the index (which documents become candidates), not the signatures: a
    #: store indexed with other values can still serve this algorithm (:meth:`with_index`).
    INDEX_PARAMS: tuple[str, ...] = ()

    @classmethod
    def check_threshold(cls, threshold: float | None) -> None:
        """Raise :class:`SettingProblem` for a ``NEARDUP_THRESHOLD`` (already in (0, 1]) this algorithm
        cannot serve, with the reason and the range it serves."""
        if threshold is None:
            return
        if cls.FIXED_THRESHOLD:
            raise SettingProblem(
                "NEARDUP_THRESHOLD", threshold, f"None: NEARDUP_ALGORITHM = {cls.name!r} has a fixed threshold"
            )
        if cls.BANDED and threshold >= 1.0:
            raise SettingProblem(
                "NEARDUP_THRESHOLD",
                threshold,
                f"a number in (0, 1) for NEARDUP_ALGORITHM = {cls.name!r} (its LSH bands are tuned "
                "for a threshold below 1; for identical pages use 'exact')",
            )

    @classmethod
    def check_settings(cls, settings: AlgorithmSettings) -> None:
        """Raise :class:`SettingProblem` for other settings this algorithm cannot serve together."""

    @classmethod
    @abstractmethod
    def from_settings(cls, settings: AlgorithmSettings) -> Algorithm:
        """The algorithm these settings describe (checked by :meth:`check_threshold` and
        :meth:`check_settings` before)."""

    def with_index(self, stored: Mapping[str, Any]) -> Algorithm | None:
        """This algorithm (same signatures, same threshold for verification) over a store whose index was
        built with ``stored`` parameters, when only :data:`INDEX_PARAMS` differ and that index can serve
        this threshold; ``None`` otherwise. What a changed threshold needs: the signatures stay comparable,
        only the candidates come from the stored index (see :meth:`index_note`)."""
        own = self.params()
        if not self.INDEX_PARAMS or set(own) != set(stored):
            return None
        if any(own[name] != stored[name] for name in own if name not in self.INDEX_PARAMS):
            return None
        return self._over_index(stored)

    def _over_index(self, stored: Mapping[str, Any]) -> Algorithm | None:
        return None

    def index_note(self) -> str:
        """What the index finds at this algorithm's threshold, for a log line."""
        return ""

    def scale_warning(self) -> str:
        """Why this algorithm's index, at these parameters, costs a lookup more the larger the store grows
        (empty when it does not): said once at start-up."""
        return ""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Everything that changes the fingerprints or the buckets, recorded with them in the store."""

    @abstractmethod
    def fingerprint(self, text: str) -> Fingerprint:
        """Signature and bucket keys of a text; :class:`NoWords` when it has too few words (see
        :func:`words`)."""

    @abstractmethod
    def similarity(self, a: bytes, b: bytes) -> float:
        """Similarity in [0, 1] of two stored signatures; near-duplicates have ``>= threshold``."""


def salted_keys(values: Iterable[int], salt: int) -> np.ndarray:
    """Bucket keys from 64-bit values, salted so that different tables never collide."""
    arr = np.fromiter((int(v) & 0xFFFFFFFFFFFFFFFF for v in values), dtype=np.uint64)
    return fmix64(arr ^ fmix64(np.array([salt], dtype=np.uint64))).view(np.int64)
