"""The one decision loop, shared by a crawl, ``dedup`` and ``evaluate``: pages in the order they arrive, the
template guard choosing the text each is filed on (and re-filing earlier pages when it finds a host's
template), declared canonical URLs weighed by the rules of :mod:`.canonical`, then the check-and-insert, in
batches where the caller can wait for verdicts.

What is decided, and in which order, is therefore the same whichever front end runs it; only where the
pages come from (worker processes of a crawl, of the batch CLI, or the evaluator's cache), and where a
declared page comes from (fetched by a crawl, later in the CLI's input), differs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .bestcopy import better_copy
from .canonical import Declarations
from .detector import Check, Detector, Verdict
from .prepare import Prepared
from .template import TemplateGuard


@dataclass(frozen=True)
class Declared:
    """The page a document declares canonical: the key it is (or would be) filed under, and what was
    prepared of it when it was had for this decision (fetched by the crawl, or read later in the CLI's
    input); ``None`` when only its URL is known."""

    key: str
    prepared: Prepared | None = None


@dataclass(frozen=True)
class Decision:
    """What became of one page: the document it was filed as (its page text instead of its main text when
    that was its host's template), its verdict, how many earlier pages it made the guard re-file,
    ``declared``, the key of the page it declared canonical (decided first when it was had), and whether
    that page was filed when this one came (``declared_filed``: the store read the decision makes anyway,
    so that a caller need not look again)."""

    key: str
    prepared: Prepared
    verdict: Verdict
    refiled: int = 0
    declared: str | None = None
    #: The page was decided before, in this loop, when a copy that declared it brought it in: this is that
    #: decision again, for its own arrival (counted once, not as *seen*).
    again: bool = False
    declared_filed: bool = False


#: Declared pages decided first whose own arrival is still to come, remembered by a loop.
MAX_DECIDED_FIRST = 10_000


@dataclass
class _Waiting:
    check: Check
    prepared: Prepared
    refiled: int
    declared: str | None = None
    declared_filed: bool = False


class DecisionLoop:
    """Decides pages in input order. With ``batch`` > 1 verdicts come back in batches (one or two store round
    trips each), the same as one by one; a page that declares a canonical URL, and a page whose guard asks
    for re-filing, first settle the pages waiting before them. With ``best_copy``, a group's page is its best
    copy (:mod:`.bestcopy`): the detector re-points a group to a better copy that arrives after its first
    page. Not thread-safe: one deciding thread."""

    def __init__(self, detector: Detector, guard: TemplateGuard | None, batch: int = 1, best_copy: bool = True) -> None:
        self.detector = detector
        self.guard = guard
        self.batch = max(1, batch)
        self.declarations = Declarations()
        self._waiting: list[_Waiting] = []
        self._decided_first: dict[str, Decision] = {}
        if best_copy:
            detector.better = self._better_copy

    def _better_copy(self, new: str, old: str) -> bool:
        """Whether the page ``new`` takes its group from ``old`` (:mod:`.bestcopy`), unless a page met by
        this loop declared ``old`` canonical (a declaration outranks the shape of a URL)."""
        return not self.declarations.declarers_of(old) and better_copy(new, old)

    def decide(self, key: str, url: str | None, prepared: Prepared, declared: Declared | None = None) -> list[Decision]:
        """Take one page with a fingerprint (filed under ``key``; ``url`` tells the guard its host;
        ``declared``, the page it declares canonical, when declarations are honoured). Returns the
        decisions made: this page's and those of the pages waiting before it, once the batch is full (at
        once with ``batch`` = 1); with a declared page that was had and that this page matches, that page's
        decision comes first (:mod:`.canonical`, rule 3)."""
        decided: list[Decision] = []
        first = self._decided_first.pop(key, None)
        if first is not None:  # brought in by a copy moments ago: that was its decision
            return [*self.flush(), replace(first, again=True)]
        fetched = prepared
        refiled = 0
        if declared is not None and declared.key == key:
            declared = None
        prefer = None  # the group of the declared page, once it is filed (one store read)
        declared_filed = False
        if declared is not None:
            decided += self.flush()  # the declared page may be waiting still
            self.declarations.note(key, declared.key)
            prefer = self.detector.group_of(declared.key)
            declared_filed = prefer is not None
            if prefer is None:
                made = self._declared_first(prepared, declared)
                decided += made
                prefer = next((d.verdict.canonical for d in made if d.key == declared.key), None)
        if self.guard is not None:
            prepared, refile = self.guard.decide(key, url, prepared)
            if refile:
                decided += self.flush()  # the pages to re-file may be waiting still
                for earlier, earlier_fp in refile:
                    refiled += self.detector.store.refile(earlier, earlier_fp.signature, earlier_fp.buckets)
        fp = prepared.fingerprint
        assert fp is not None, "only pages with a fingerprint are decided"
        # A known page may have been filed on either of its texts (see TemplateGuard): both count.
        also = tuple(
            f.signature for f in (fetched.fingerprint, fetched.page_fingerprint) if f is not None and f is not fp
        )
        check = Check(key, fp.signature, fp.buckets, also, prefer, self.declarations.declarers_of(key), prepared.body)
        self._waiting.append(
            _Waiting(check, prepared, refiled, None if declared is None else declared.key, declared_filed)
        )
        if declared is not None or len(self._waiting) >= self.batch:
            decided += self.flush()
        return decided

    def _declared_first(self, prepared: Prepared, declared: Declared) -> list[Decision]:
        """Decide the declared page (not filed yet) first when it was had and this page matches it: a copy
        brings its original in (a declaration the content does not bear out brings in nothing)."""
        theirs = declared.prepared
        if theirs is None or theirs.fingerprint is None or prepared.fingerprint is None:
            return []
        if self.detector.matches(prepared.fingerprint.signature, theirs.fingerprint.signature) is None:
            return []
        if theirs.declared_canonical and theirs.declared_canonical != declared.key:
            self.declarations.note(declared.key, theirs.declared_canonical)  # a chain: followed one step
        made = self.decide(declared.key, declared.key, theirs) + self.flush()
        for decision in made:
            if decision.key == declared.key:
                self._decided_first[decision.key] = decision
                while len(self._decided_first) > MAX_DECIDED_FIRST:
                    self._decided_first.pop(next(iter(self._decided_first)))
        return made

    def flush(self) -> list[Decision]:
        """Decide every page waiting; their decisions, in input order."""
        if not self._waiting:
            return []
        waiting, self._waiting = self._waiting, []
        verdicts = self.detector.check_many([w.check for w in waiting])
        return [
            Decision(w.check.key, w.prepared, verdict, w.refiled, w.declared, declared_filed=w.declared_filed)
            for w, verdict in zip(waiting, verdicts)
        ]
