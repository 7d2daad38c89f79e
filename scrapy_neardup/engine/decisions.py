"""The one decision loop, shared by a crawl, ``dedup`` and ``evaluate``: pages in the order they arrive, the
template guard choosing the text each is filed on (and re-filing earlier pages when it finds a host's
template), then the check-and-insert, in batches where the caller can wait for verdicts.

What is decided, and in which order, is therefore the same whichever front end runs it; only where the
pages come from (worker processes of a crawl, of the batch CLI, or the evaluator's cache) differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .detector import Detector, Verdict
from .prepare import Prepared
from .template import TemplateGuard


@dataclass(frozen=True)
class Decision:
    """What became of one page: the document it was filed as (its page text instead of its main text when
    that was its host's template), its verdict, and how many earlier pages it made the guard re-file."""

    key: str
    prepared: Prepared
    verdict: Verdict
    refiled: int = 0


@dataclass
class _Waiting:
    key: str
    prepared: Prepared
    refiled: int
    also: Sequence[bytes] = field(default_factory=tuple)


class DecisionLoop:
    """Decides pages in input order. With ``batch`` > 1 verdicts come back in batches (one or two store round
    trips each), the same as one by one; a page that declares a canonical URL, and a page whose guard asks
    for re-filing, first settle the pages waiting before them. Not thread-safe: one deciding thread."""

    def __init__(self, detector: Detector, guard: TemplateGuard | None, batch: int = 1) -> None:
        self.detector = detector
        self.guard = guard
        self.batch = max(1, batch)
        self._waiting: list[_Waiting] = []

    def decide(self, key: str, url: str | None, prepared: Prepared,
               declared: str | None = None) -> list[Decision]:
        """Take one page with a fingerprint (filed under ``key``; ``url`` tells the guard its host;
        ``declared``, the canonical URL it declares, if it is to be honoured). Returns the decisions made:
        this page's and those of the pages waiting before it, once the batch is full (at once with
        ``batch`` = 1)."""
        fetched = prepared
        decided: list[Decision] = []
        refiled = 0
        if self.guard is not None:
            prepared, refile = self.guard.decide(key, url, prepared)
            if refile:
                decided += self.flush()  # the pages to re-file may be waiting still
                for earlier, earlier_fp in refile:
                    refiled += self.detector.store.refile(earlier, earlier_fp.signature, earlier_fp.buckets)
        fp = prepared.fingerprint
        assert fp is not None, "only pages with a fingerprint are decided"
        # A known page may have been filed on either of its texts (see TemplateGuard): both count.
        also = tuple(f.signature for f in (fetched.fingerprint, fetched.page_fingerprint)
                     if f is not None and f is not fp)
        if declared and declared != key:
            decided += self.flush()
            verdict = self.detector.check_declared(key, declared, fp.signature, fp.buckets, also)
            return [*decided, Decision(key, prepared, verdict, refiled)]
        self._waiting.append(_Waiting(key, prepared, refiled, also))
        if len(self._waiting) >= self.batch:
            decided += self.flush()
        return decided

    def flush(self) -> list[Decision]:
        """Decide every page waiting; their decisions, in input order."""
        if not self._waiting:
            return []
        waiting, self._waiting = self._waiting, []
        items = []
        for w in waiting:
            filed = w.prepared.fingerprint
            assert filed is not None
            items.append((w.key, filed.signature, filed.buckets, w.also))
        verdicts = self.detector.check_many(items)
        return [Decision(w.key, w.prepared, verdict, w.refiled) for w, verdict in zip(waiting, verdicts)]
