"""A template's learned extraction as the store keeps it (:class:`Selector`), as a page is sent with it
(:class:`Offer`, :class:`Offers`), and how often it is checked against trafilatura."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import mmh3

from .lesson import AGREEMENT, Locator, replay_element
from .page import KeySet, either_keys

#: The learned format; a selector of another version is never replayed.
LEARNER_VERSION = 3
#: A template is left to trafilatura (``unstable``) after this many retirements in a row that were not
#: forgiven (:meth:`Selector.retire`), for a while (:meth:`Selector.relearn_after`).
MAX_RETIREMENTS = 3
#: Pages of a template found ``unstable`` for the first time that go to trafilatura before it is learned
#: again; doubled each time it is found unstable again (:meth:`Selector.relearn_after`).
RELEARN_AFTER = 1000
#: Pages a selector served before its retirement for the retirement, and those before it, to be forgiven
#: (:meth:`Selector.retire`).
FORGIVEN_AFTER = 100


@dataclass(frozen=True)
class Selector:
    """A template's learned extraction, as the store keeps it (JSON, never pickled).

    ``host`` and ``template`` (:func:`skeleton_key`) name the template; ``locator`` and ``decisions`` are the
    merged lessons (a path the lessons decided both ways is left out: a page with text there goes to
    trafilatura); ``extractor`` names what it reproduces (:func:`extractor_id`): a selector of another
    extractor, version or setting is never used. ``state``: ``active`` (replayed, verified by sampling),
    ``retired`` (a verification disagreed: learned again) or ``unstable`` (retired too often: trafilatura
    only). ``served``: pages replayed; ``verified``: replays checked against trafilatura and found to agree;
    ``retired``: how often the template's selector was retired (it only grows: every process takes the
    record retired most often), ``forgiven``: how many of those retirements are forgiven (all of them up to
    the last of a selector that had served :data:`FORGIVEN_AFTER` pages; they do not count towards
    ``unstable``). ``checked`` and
    ``missed``: how many pages its replay was compared with trafilatura on (its lessons' own pages, then its
    checks), and the sum of what each missed of trafilatura's word pairs (``1 - agreement``):
    :meth:`after_check` reads them.
    ``waited``: the pages of an ``unstable`` template gone to trafilatura since it was found unstable, kept
    with the record so that the wait (:meth:`relearn_after`) runs on over a site's later crawls, most of
    which meet far fewer of its pages than the wait; with several processes at once, the most any of them
    counted.
    """

    host: str
    template: int
    locator: Locator
    decisions: Mapping[str, bool]
    extractor: str
    state: str = "active"
    served: int = 0
    verified: int = 0
    retired: int = 0
    conflicts: frozenset[str] = field(default_factory=frozenset)
    kept_low: float = 0.0
    checked: int = 0
    missed: float = 0.0
    forgiven: int = 0
    waited: int = 0

    @property
    def usable(self) -> bool:
        return self.state == "active"

    def retire(self) -> Selector:
        """This selector retired: ``unstable`` when its template's last :data:`MAX_RETIREMENTS` selectors
        were each retired before they served :data:`FORGIVEN_AFTER` pages. One that served that many held
        its template through many checks: what retired it was a page it misreads (checks are picked by URL,
        so each crawl checks that page again) or a change of the template, and learning it again is worth
        its price; it also shows the template can be learned, so the retirements before it are forgiven
        with its own (over a long crawl, short-lived selectors between long-lived ones would otherwise add
        up). One retired sooner was never sound for long, and three such in a row leave the template to
        trafilatura, for :meth:`relearn_after` of its pages; after that, one more short-lived selector is
        enough to leave it there again, for twice as long."""
        retired = self.retired + 1
        forgiven = retired if self.served >= FORGIVEN_AFTER else self.forgiven
        state = "unstable" if retired - forgiven >= MAX_RETIREMENTS else "retired"
        return replace(self, state=state, retired=retired, forgiven=forgiven, waited=0)

    def relearn_after(self) -> int:
        """How many pages of this ``unstable`` template go to trafilatura before it is learned again:
        :data:`RELEARN_AFTER`, doubled for each time it was found unstable since its retirements were last
        forgiven. A template left to trafilatura for good would send every page of a large template to it
        for as long as the site is crawled, because of a few checks that disagreed once (trafilatura itself
        wobbles on some templates, and sites change); learning it again costs a few lessons and checks. A
        wait that doubles keeps the lessons and checks spent on a template that never holds to a few per cent
        of its pages."""
        found_unstable = max(1, self.retired - self.forgiven - MAX_RETIREMENTS + 1)
        return RELEARN_AFTER * 2 ** min(found_unstable - 1, 16)

    def after_check(self, agreement: float, bound: float) -> Selector | None:
        """This selector with one more check counted (its replay of a page against trafilatura's text of
        it, ``agreement``), or ``None`` when the check retires it.

        ``1 - bound`` (``ε``) is the share of trafilatura's word pairs a replay may miss: by the metric
        argument of :mod:`.learned`, what a verdict can move by. trafilatura itself is not constant across
        one template's pages (a lead paragraph or a teaser kept on some, a heading repeated on others), so a
        sound selector misses a little more than ``ε`` on a few pages; retiring it there would learn the same
        selector again, at trafilatura's price. The bound is therefore held on average, as a control chart
        holds a process mean: a check retires the selector when the mean miss over its lessons and checks
        passes ``ε``, or at once when one replay misses more than ``2ε`` (the template changed: an element
        moved, a block appeared)."""
        epsilon = 1.0 - bound
        miss = max(0.0, 1.0 - agreement)
        checked, missed = self.checked + 1, self.missed + miss
        if miss > 2 * epsilon or missed > epsilon * checked:
            return None
        return replace(
            self,
            served=self.served + 1,
            verified=self.verified + (agreement >= bound),
            checked=checked,
            missed=missed,
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": LEARNER_VERSION,
                "host": self.host,
                "template": self.template,
                "css": self.locator.css,
                "index": self.locator.index,
                "matches": self.locator.matches,
                "decisions": dict(self.decisions),
                "conflicts": sorted(self.conflicts),
                "extractor": self.extractor,
                "state": self.state,
                "served": self.served,
                "verified": self.verified,
                "retired": self.retired,
                "kept_low": self.kept_low,
                "checked": self.checked,
                "missed": self.missed,
                "forgiven": self.forgiven,
                "waited": self.waited,
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    @staticmethod
    def format_of(text: str | bytes) -> int | None:
        """The learner format a stored record says it has (``v``), or ``None`` when it says none: a record of
        another format is another learner's, not a broken one."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        version = data.get("v") if isinstance(data, dict) else None
        return version if isinstance(version, int) and not isinstance(version, bool) else None

    @classmethod
    def from_json(cls, text: str | bytes) -> Selector | None:
        """A stored selector, or ``None`` when the record is not one this version reads (checked field by
        field: store data is data, never trusted)."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("v") != LEARNER_VERSION:
                return None
            decisions = data["decisions"]
            ok = (
                isinstance(data["host"], str)
                and isinstance(data["template"], int)
                and isinstance(data["css"], str)
                and isinstance(data["index"], int)
                and isinstance(data["matches"], int)
                and 0 <= data["index"] < data["matches"]
                and isinstance(decisions, dict)
                and all(isinstance(k, str) and isinstance(v, bool) for k, v in decisions.items())
                and isinstance(data["conflicts"], list)
                and all(isinstance(c, str) for c in data["conflicts"])
                and isinstance(data["extractor"], str)
                and data["state"] in ("active", "retired", "unstable")
                and all(isinstance(data[n], int) and data[n] >= 0 for n in ("served", "verified", "retired"))
                and isinstance(data["kept_low"], (int, float))
                and 0.0 <= data["kept_low"] <= 1.0
                and isinstance(data["checked"], int)
                and data["checked"] >= 0
                and isinstance(data["missed"], (int, float))
                and 0.0 <= data["missed"] <= data["checked"]
                and isinstance(data.get("forgiven", 0), int)
                and 0 <= data.get("forgiven", 0) <= data["retired"]
                and isinstance(data.get("waited", 0), int)
                and data.get("waited", 0) >= 0
            )
            if not ok:
                return None
            return cls(
                data["host"],
                data["template"],
                Locator(data["css"], data["index"], data["matches"]),
                decisions,
                data["extractor"],
                data["state"],
                data["served"],
                data["verified"],
                data["retired"],
                frozenset(data["conflicts"]),
                float(data["kept_low"]),
                data["checked"],
                float(data["missed"]),
                data.get("forgiven", 0),
                data.get("waited", 0),
            )
        except (ValueError, KeyError, TypeError):
            return None


def extractor_id(favor: str, fast: bool) -> str:
    """What a selector reproduces: trafilatura's version and the settings it ran with, and this learner's."""
    from importlib.metadata import version

    return f"trafilatura {version('trafilatura')} favor={favor} fast={int(fast)} learner={LEARNER_VERSION}"


def merge(
    selector_decisions: Mapping[str, bool], conflicts: frozenset[str], taught: Mapping[str, bool]
) -> tuple[dict[str, bool], frozenset[str]]:
    """A template's decisions with one more lesson's: a path decided both ways becomes a conflict (neither
    kept nor dropped: a page with text there goes to trafilatura)."""
    merged = dict(selector_decisions)
    clashes = set(conflicts)
    for path, keep in taught.items():
        if path in clashes:
            continue
        known = merged.get(path)
        if known is None:
            merged[path] = keep
        elif known != keep:
            del merged[path]
            clashes.add(path)
    return merged, frozenset(clashes)


@dataclass(frozen=True)
class Offers:
    """What a page of a host is sent with: the host's selectors by template, the pre-keys met on the host
    (a page whose pre-key is not among them is not parsed: :func:`prekey`), the templates met often enough
    to teach (:data:`TEACHES_FROM`), both as a :data:`KeySet`, the templates whose selector was retired
    (learned again from the lessons of their next pages), and whether every page is parsed whatever its
    pre-key (``parse_all``: see :data:`.learner.PARSE_ALL_TRIAL`)."""

    selectors: Mapping[int, Offer]
    parse: KeySet
    learn: KeySet
    retired: frozenset[int] = frozenset()
    parse_all: bool = False

    def under(self, other: Offers) -> Offers:
        """These offers (a worker's own) with ``other``'s (the deciding process's) over them: its selectors
        first, none of ours for a template it retired (its pages teach instead of being replayed by a
        selector the deciding process no longer vouches for), the sets of both, and whether to parse every
        page as it says (it sees all the host's pages)."""
        ours = {template: offer for template, offer in self.selectors.items() if template not in other.retired}
        return Offers(
            {**ours, **other.selectors},
            either_keys(self.parse, other.parse),
            either_keys(self.learn, other.learn),
            self.retired | other.retired,
            other.parse_all,
        )


def replay(tree: Any, offer: Offer, bound: float = AGREEMENT) -> str | None:
    """The page's main text by its template's selector (``bound``: the agreement it is held to); ``None``
    when the selector refuses the page."""
    article = offer.locator.find(tree)
    if article is None:
        return None
    return replay_element(article, offer.decisions, offer.kept_low, offer.conflicts, bound)


#: The least share of a selector's pages checked against trafilatura (``NEARDUP_LEARN_CHECK_SHARE``): a
#: changed template that the replay's own refusals miss is met by a check within 64 pages on average.
MIN_CHECK_SHARE = 1 / 64


def verify_share(served: int, floor: float = MIN_CHECK_SHARE) -> float:
    """The share of a selector's pages also extracted by trafilatura to check it: a quarter of its first
    (its lessons already checked it on as many pages as it needs lessons), fewer as it proves itself
    (``1 / (4 + 2 * served)``: about ``ln(n) / 2`` checks in its first ``n`` pages), never under ``floor``."""
    return max(floor, 1 / (4 + 2 * served))


def sampled(url: str, share: float) -> bool:
    """Whether this page is one of the ``share`` checked: decided by its URL, the same in every process."""
    return mmh3.hash(url, 0x5A3B, signed=False) < share * 2**32


@dataclass(frozen=True)
class Offer:
    """A template's selector as sent with a page of its host: replay it (checked against trafilatura for
    ``share`` of the pages), or, ``unstable``, neither replay nor learn: trafilatura only."""

    template: int
    locator: Locator
    decisions: Mapping[str, bool]
    share: float
    unstable: bool = False
    kept_low: float = 0.0
    conflicts: frozenset[str] = frozenset()
