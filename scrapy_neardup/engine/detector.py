"""The decision: is this text a near-duplicate of one already filed? Check and file it in one step."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..store.base import (
    FORMAT_VERSION,
    MAX_CHAIN,
    Added,
    Candidate,
    DocRecord,
    Filing,
    Query,
    Store,
    StoreError,
    group_of,
)
from .algorithms.base import Algorithm

Status = Literal["unique", "duplicate", "seen", "soft404"]
#: Why a known key was checked afresh instead of being *seen*: its content changed beyond the threshold,
#: its record is older than the age limit, or its canonical was removed (see :class:`DocRecord`).
Recheck = Literal["changed", "expired", "orphaned"]

#: How many rounds of a check-and-insert may pass without deciding a document (every insert refused
#: because other processes filed documents in the same buckets meanwhile) before it gives up.
MAX_RETRIES = 16
#: The first and the longest pause (seconds) after a round of check-and-insert that decided nothing.
FIRST_BACKOFF_SECS = 0.002
MAX_BACKOFF_SECS = 0.25


@dataclass(frozen=True)
class Check:
    """One document to check-and-insert: filed under ``key`` with ``signature`` and ``buckets``.

    ``also``: other signatures of the same fetch (the page text beside the main text; a known key matching
    its record by any of them is *seen*). ``prefer``: the canonical page to file it under when it matches
    that page (a declaration borne out, see :mod:`.canonical`), whatever else it resembles more. ``exclude``:
    canonical pages it must not be filed under (the copies that declared it: :mod:`.canonical`, rule 4).
    ``body``: the digest of the page's bytes (:attr:`DocRecord.body`), filed with it; a known key fetched
    again with the bytes it was filed with is *seen*, whatever its text this time.
    """

    key: str
    signature: bytes
    buckets: Any
    also: Sequence[bytes] = ()
    prefer: str | None = None
    exclude: frozenset[str] = frozenset()
    body: bytes | None = None


@dataclass(frozen=True)
class Verdict:
    """What the detector decided for one document.

    ``status`` is ``unique`` (filed as a new canonical page), ``duplicate`` (a near-duplicate of
    ``canonical`` with ``similarity``), or ``seen`` (the key was filed before: a re-crawl, not a
    near-duplicate of itself; ``canonical`` says what it was filed as). A crawl adds ``soft404``: a page that
    is its host's answer to a URL that cannot exist (``canonical``: that URL), never filed.
    """

    status: Status
    key: str
    canonical: str
    similarity: float
    #: Other canonical documents at or above the threshold, best first (for connected-component clusters).
    also: tuple[str, ...] = ()
    #: Set when the key was filed before but its record was replaced: why it was checked afresh.
    rechecked: Recheck | None = None
    #: The group's former canonical page, when this page is a better copy and the group was re-pointed to it
    #: (:meth:`Detector.check_many`): ``status`` is then ``duplicate`` of that page when it was fetched in
    #: this session (it reached the spider already), else ``unique``.
    displaced: str | None = None

    @property
    def is_duplicate(self) -> bool:
        return self.status == "duplicate" or (self.status == "seen" and self.canonical != self.key)


class Detector:
    """Joins an algorithm to a store. Not thread-safe; one per crawler or batch job.

    A key filed before is *seen* (a re-crawl, not a near-duplicate of itself) as long as its record still
    stands for the page. It is checked afresh, its record replaced, when the new fetch is below the
    threshold against what the record was judged by (``recheck_changed``: the page changed), when it was
    last seen more than ``max_age_secs`` ago, or when its canonical was removed. A fetch with the bytes the
    record was filed with (:attr:`Check.body`) is the page the verdict was made on: it is seen, even when
    its text, found another way this time (a learned template's replay instead of trafilatura, or the
    reverse: :mod:`.learned`), falls below that bar.

    ``text_params``: what the texts were taken from, stored beside the algorithm's parameters so that a
    store refuses fingerprints of other texts (another main-content extractor).
    """

    def __init__(
        self,
        algorithm: Algorithm,
        store: Store,
        recheck_changed: bool = True,
        max_age_secs: float | None = None,
        text_params: Mapping[str, object] | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.store = store
        self.recheck_changed = recheck_changed
        self.max_age_secs = max_age_secs or None
        self.text_params = dict(text_params or {})
        #: Whether a page should be its group's page instead of the group's canonical (new URL, canonical
        #: URL): set by a caller that re-points groups to their best copy (:mod:`.bestcopy`); ``None``: a
        #: group keeps the first page filed.
        self.better: Callable[[str, str], bool] | None = None
        #: When this session began: a page last seen since was fetched in it (:meth:`fetched_now`). Set by
        #: :meth:`begin_session`: a crawl's is when the crawl it joined on the store began
        #: (:class:`~scrapy_neardup.store.parts.RunningCrawl`).
        self.session_started = time.time()
        #: How a check-and-insert waits between fruitless rounds (:meth:`check_many`).
        self.pause: Callable[[float], None] = time.sleep
        self._jitter = random.Random()

    def meta(self) -> dict[str, object]:
        return {"format_version": FORMAT_VERSION, **self.algorithm.params(), **self.text_params}

    def open(self, reset: bool = False) -> None:
        self.store.open(self.meta(), reset=reset)

    def close(self) -> None:
        self.store.close()

    def check(self, key: str, text: str) -> Verdict:
        """Decide for ``text`` under ``key`` and file it: atomically, even with other writers."""
        fp = self.algorithm.fingerprint(text)
        return self.check_fingerprint(key, fp.signature, fp.buckets)

    def _recheck(self, known: DocRecord, signatures: Sequence[bytes], body: bytes | None = None) -> Recheck | None:
        """Why the known record of a key fetched again with ``signatures`` (its fingerprint, and the other
        texts of the same fetch it may have been filed on) and the bytes of digest ``body`` must be replaced;
        ``None``: it is seen."""
        if known.orphaned:
            return "orphaned"
        if self.max_age_secs is not None and known.seen is not None and known.seen < time.time() - self.max_age_secs:
            return "expired"
        if body is not None and known.body == body:
            return None  # the bytes it was filed with
        reference = known.reference
        if not self.recheck_changed or not reference or not signatures:
            return None
        where = known.canonical or known.key
        # Below the threshold *and* below the similarity the record was judged at: a page that is as it was
        # when filed is seen, whatever the threshold has become since (a changed NEARDUP_THRESHOLD).
        bar = min(self.algorithm.threshold, known.similarity) - 1e-6
        if all(self._similarity(sig, where, reference) < bar for sig in signatures):
            return "changed"
        return None

    def _similarity(self, signature: bytes, key: str, stored: bytes) -> float:
        """The similarity of ``signature`` to the signature stored for ``key``; a stored signature the
        algorithm cannot read (a record damaged in the store) is a :class:`StoreError` naming the key."""
        try:
            return self.algorithm.similarity(signature, stored)
        except (ValueError, TypeError, IndexError) as exc:
            raise StoreError(
                f"the stored signature of {key!r} is malformed ({len(stored or b'')} bytes: {exc})"
            ) from exc

    def best_matches(self, check: Check, candidates: Sequence[Candidate]) -> list[tuple[float, Candidate]]:
        """Candidates at or above the threshold, most similar first (ties by key, for determinism); the
        check's preferred canonical first whenever it is among them, its excluded ones left out."""
        matches = []
        for cand in candidates:
            if cand.key in check.exclude:
                continue
            sim = self._similarity(check.signature, cand.key, cand.signature)
            if sim >= self.algorithm.threshold:
                matches.append((cand.key != check.prefer, -sim, cand.key, cand))
        matches.sort(key=lambda m: m[:3])
        return [(-neg, cand) for _, neg, _, cand in matches]

    def check_many(self, items: Sequence[Check | tuple[Any, ...]]) -> list[Verdict]:
        """Check-and-insert a batch of :class:`Check` (or ``(key, signature, buckets[, also])`` tuples) in
        input order, as :meth:`check_fingerprint` would one by one, with one lookup and one insert round trip
        per round. A document whose insert was refused (another writer, or an earlier document of the same
        batch, filed a near-duplicate in its buckets meanwhile) goes into the next round and so finds that
        document; rounds go on while each decides a document, and give up after :data:`MAX_RETRIES` in a row
        that decide none, pausing between them (:attr:`pause`). So does a known key whose record is replaced
        (see the class): it is removed, then checked as new."""
        checks = [item if isinstance(item, Check) else Check(*item) for item in items]
        verdicts: list[Verdict | None] = [None] * len(checks)
        rechecked: dict[int, Recheck] = {}
        pending = list(range(len(checks)))
        fruitless = 0  # rounds in a row that decided nothing (a round that decides one goes on at once)
        while pending and fruitless < MAX_RETRIES:
            looked = self.store.lookup_many(
                [Query(checks[i].key, checks[i].signature, checks[i].buckets, checks[i].body) for i in pending],
                file_alone=True,
            )
            adds: list[Filing] = []
            planned: list[tuple[int, Verdict]] = []
            waiting: list[int] = []
            stale: list[str] = []
            # Buckets of the pages this round files as canonical or sends to the next round, and the canonicals
            # taken by better copies: a later page of the batch that meets either looks again next round, as
            # it would one page at a time (its verdict may depend on theirs).
            claimed: set[int] = set()
            displaced: set[str] = set()
            for i, found in zip(pending, looked):
                check = checks[i]
                key, signature, buckets = check.key, check.signature, check.buckets
                known = found.known
                if (claimed or displaced) and known is None and not found.filed:
                    mine = set(np.asarray(buckets, dtype=np.int64).tolist())
                    if not claimed.isdisjoint(mine) or any(c.key in displaced for c in found.candidates):
                        claimed.update(mine)
                        waiting.append(i)
                        continue
                if known is not None:
                    root = self._root(known)
                    reason = "orphaned" if root is None else self._recheck(known, [signature, *check.also], check.body)
                    if reason is None:
                        verdicts[i] = Verdict("seen", key, root or key, known.similarity)
                    else:
                        rechecked[i] = reason
                        stale.append(key)
                        waiting.append(i)
                    continue
                if found.filed:
                    verdicts[i] = Verdict("unique", key, key, 1.0, rechecked=rechecked.get(i))
                    continue
                token = found.token
                matches = self.best_matches(check, found.candidates)
                if matches:
                    (sim, best), also = matches[0], tuple(c.key for _, c in matches[1:])
                    if self._displaces(check, best.key):
                        # A better copy of the group: filed as canonical, then the group re-pointed to it.
                        adds.append(Filing(key, signature, buckets, None, 1.0, token, body=check.body))
                        claimed.update(np.asarray(buckets, dtype=np.int64).tolist())
                        displaced.add(best.key)
                        status: Status = "duplicate" if self.fetched_now(best.key) else "unique"
                        canonical = best.key if status == "duplicate" else key
                        verdict = Verdict(status, key, canonical, sim, also, rechecked.get(i), displaced=best.key)
                        planned.append((i, verdict))
                        continue
                    adds.append(Filing(key, signature, buckets, best.key, sim, token, best.ref, check.body))
                    planned.append((i, Verdict("duplicate", key, best.key, sim, also, rechecked.get(i))))
                else:
                    # Copies that declared this page resemble it: linked for connected components, not filed.
                    declarers = tuple(
                        sorted(
                            c.key
                            for c in found.candidates
                            if c.key in check.exclude
                            and self._similarity(signature, c.key, c.signature) >= self.algorithm.threshold
                        )
                    )
                    adds.append(Filing(key, signature, buckets, None, 1.0, token, body=check.body))
                    claimed.update(np.asarray(buckets, dtype=np.int64).tolist())
                    planned.append((i, Verdict("unique", key, key, 1.0, declarers, rechecked.get(i))))
            for (i, verdict), result in zip(planned, self.store.add_many(adds) if adds else []):
                if result == Added.FILED:
                    verdicts[i] = verdict if verdict.displaced is None else self._repoint(verdict)
                else:
                    waiting.append(i)
            if stale:
                self.store.remove(stale)
            # A batch whose documents share buckets files them one round each, in order: never a failure.
            fruitless = 0 if stale or len(waiting) < len(pending) else fruitless + 1
            pending = sorted(waiting)
            if pending and 0 < fruitless < MAX_RETRIES:
                # Writers whose rounds collided would collide again in step: a random pause up to a bound
                # that doubles with each fruitless round (exponential backoff with full jitter) puts them
                # out of step.
                self.pause(self._jitter.uniform(0, min(MAX_BACKOFF_SECS, FIRST_BACKOFF_SECS * 2**fruitless)))
        if pending:
            raise StoreError(f"check-and-insert kept colliding with other writers ({MAX_RETRIES} tries)")
        return verdicts  # type: ignore[return-value]

    def check_fingerprint(self, key: str, signature: bytes, buckets: Any, also: Sequence[bytes] = ()) -> Verdict:
        return self.check_many([Check(key, signature, buckets, also)])[0]

    def _displaces(self, check: Check, canonical: str) -> bool:
        """Whether the page of ``check`` takes its group from ``canonical``: a better copy by the caller's
        policy, unless a declaration borne out chose the group (``prefer``)."""
        return self.better is not None and check.prefer is None and self.better(check.key, canonical)

    def _repoint(self, verdict: Verdict) -> Verdict:
        """The page of ``verdict`` was filed as canonical beside its group's canonical (``displaced``): make
        that page its near-duplicate. When another process re-pointed the group first, the better of the two
        pages keeps it; this page's verdict says which group it joined."""
        old = verdict.displaced
        for _ in range(MAX_CHAIN):
            if old is None or old == verdict.key:
                return verdict
            if self.store.repoint(old, verdict.key, verdict.similarity):
                return verdict
            root = self.group_of(old)
            if root is None or root == verdict.key:
                return verdict
            if self.better is not None and self.better(verdict.key, root):
                old = root
                continue
            # The group's page now is a better copy than this one: this page joins it.
            if self.store.repoint(verdict.key, root, verdict.similarity):
                return Verdict("duplicate", verdict.key, root, verdict.similarity, verdict.also, verdict.rechecked)
            old = self.group_of(verdict.key)
        return verdict

    def begin_session(self, join: Callable[[float], float] | None = None) -> None:
        """Begin this session (a crawl, a batch run): at once on an empty store; on a store that holds pages,
        at the next whole second, waited for here. Last-seen times are whole seconds, so a session begun
        within the second the session before it last saw a page in could not tell that page from one of its
        own (:meth:`fetched_now`): a predicted copy of it would be left unfetched and its group not delivered.
        ``join`` turns the proposed start into the start of the crawl this process joins
        (:meth:`~scrapy_neardup.store.parts.RunningCrawl.join`: an earlier one when other processes crawl on
        the store, whose start is then this session's)."""
        try:
            empty = self.store.count() == 0
        except StoreError:  # it cannot say: as if it held pages
            empty = False
        now = time.time()
        proposed = now if empty else float(math.floor(now) + 1)
        self.session_started = proposed if join is None else min(proposed, join(proposed))
        delay = self.session_started - time.time()
        if delay > 0:
            time.sleep(delay)

    def fetched_now(self, key: str) -> bool:
        """Whether ``key`` was filed or fetched again in this session (its last-seen time, in whole seconds:
        :meth:`begin_session` makes a session begin after the last second of the one before)."""
        record = self.store.get(key)
        return record is not None and record.seen is not None and record.seen >= int(self.session_started)

    def _root(self, record: DocRecord) -> str | None:
        """The group's page of a filed ``record``: its canonical, followed through re-pointed ones
        (:attr:`DocRecord.chained`); ``None`` when the chain ends in an orphan."""
        if record.orphaned:
            return None
        if record.canonical is None:
            return record.key
        return self.group_of(record.canonical) if record.chained else record.canonical

    def group_of(self, key: str) -> str | None:
        """The canonical page of the group ``key`` is filed in (itself when it is canonical; through the
        canonicals its group was re-pointed from); ``None`` when it is not filed, or its record is orphaned."""
        return group_of(self.store, key)

    def matches(self, signature: bytes, other: bytes) -> float | None:
        """The similarity of two fingerprints when it is at or above the threshold; else ``None``."""
        similarity = self.algorithm.similarity(signature, other)
        return similarity if similarity >= self.algorithm.threshold else None
