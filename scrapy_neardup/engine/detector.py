"""The decision: is this text a near-duplicate of one already filed? Check and file it in one step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..store.base import FORMAT_VERSION, Store, StoreError
from .algorithms import Algorithm

Status = Literal["unique", "duplicate", "seen"]

#: How often a check-and-insert is retried when another process filed a document in the same buckets.
MAX_RETRIES = 16


@dataclass(frozen=True)
class Verdict:
    """What the detector decided for one document.

    ``status`` is ``unique`` (filed as a new canonical page), ``duplicate`` (a near-duplicate of
    ``canonical`` with ``similarity``), or ``seen`` (the key was filed before: a re-crawl, not a
    near-duplicate of itself; ``canonical`` says what it was filed as).
    """

    status: Status
    key: str
    canonical: str
    similarity: float
    #: Other canonical documents at or above the threshold, best first (for connected-component clusters).
    also: tuple[str, ...] = ()

    @property
    def is_duplicate(self) -> bool:
        return self.status == "duplicate" or (self.status == "seen" and self.canonical != self.key)


class Detector:
    """Joins an algorithm to a store. Not thread-safe; one per crawler or batch job."""

    def __init__(self, algorithm: Algorithm, store: Store) -> None:
        self.algorithm = algorithm
        self.store = store

    def meta(self) -> dict[str, object]:
        return {"format_version": FORMAT_VERSION, **self.algorithm.params()}

    def open(self, reset: bool = False) -> None:
        self.store.open(self.meta(), reset=reset)

    def close(self) -> None:
        self.store.close()

    def check(self, key: str, text: str) -> Verdict:
        """Decide for ``text`` under ``key`` and file it: atomically, even with other writers."""
        known = self.store.get(key)
        if known is not None:
            return Verdict("seen", key, known.canonical or key, known.similarity)
        fp = self.algorithm.fingerprint(text)
        return self.check_fingerprint(key, fp.signature, fp.buckets)

    def check_fingerprint(self, key: str, signature: bytes, buckets) -> Verdict:  # type: ignore[no-untyped-def]
        algorithm = self.algorithm
        for _ in range(MAX_RETRIES):
            candidates, token = self.store.lookup(buckets)
            matches = []
            for cand in candidates:
                sim = algorithm.similarity(signature, cand.signature)
                if sim >= algorithm.threshold:
                    matches.append((-sim, cand.key))
            if matches:
                matches.sort()
                best_sim, best_key = -matches[0][0], matches[0][1]
                self.store.add(key, signature, buckets, canonical=best_key, similarity=best_sim)
                return Verdict("duplicate", key, best_key, best_sim, tuple(k for _, k in matches[1:]))
            if self.store.add(key, signature, buckets, token=token):
                return Verdict("unique", key, key, 1.0)
        raise StoreError(f"check-and-insert of {key!r} kept colliding with other writers ({MAX_RETRIES} tries)")
