"""The crawl's learned templates, in the process that decides (:class:`TemplateLearner`)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

from .lesson import AGREEMENT, Lesson
from .page import key_set
from .selector import MIN_CHECK_SHARE, Offer, Offers, Selector, merge, verify_share

#: Hosts, and templates (and pre-keys) a host, remembered as met (the least recently met forgotten first).
MAX_SEEN_HOSTS, MAX_SEEN_TEMPLATES = 100_000, 4096
#: A template teaches once its pages were parsed ``TEACHES_FROM - 1`` times, and a page is parsed for its
#: template only when its pre-key was met before on its host: most templates of a broad crawl are met once
#: or twice, and parsing a page costs a twentieth of trafilatura's time, a lesson a quarter.
TEACHES_FROM = 4
#: Lessons that must agree on where a template's article sits before its selector is used
#: (``NEARDUP_LEARN_LESSONS``). Each lesson already reproduced trafilatura's text on its own page, and a young
#: selector is checked on a quarter, a sixth, an eighth ... of its first pages (:func:`.selector.verify_share`).
LESSONS = 2
#: Every page of a host that has a selector is parsed, whatever its pre-key, while fewer than this many of
#: its pages were parsed or at least half of them met a template with a selector: pre-keys are remembered by
#: each process, so a crawl that starts warm meets each of them anew, and would otherwise send the first page
#: of each to trafilatura; a host whose parsed pages seldom find a selector (one host serving pages of many
#: sites) keeps the pre-key's gate. The counts are halved every ``PARSE_ALL_WINDOW`` pages, so that they
#: follow what the host serves now. While every page of a host is parsed its pages' pre-keys are not read:
#: a host that goes back to the gate meets its pre-keys anew, as a crawl that starts warm does.
PARSE_ALL_TRIAL, PARSE_ALL_WINDOW = 16, 1024


class TemplateLearner:
    """The crawl's learned templates: lessons gathered per template until ``lessons`` agree on where the
    article sits, then an active selector, its pages counted, retired when a check disagrees.

    State of the deciding process; the selectors are shared through the store (:meth:`adopt`,
    :meth:`take_changes`), lessons are not (each process learns from its own pages; the first selector
    saved is the one every process adopts). Memory is bounded: ``MAX_SEEN_HOSTS`` hosts are remembered,
    with their lessons and the templates met (``MAX_SEEN_TEMPLATES`` each), the least recently met first
    forgotten; selectors are kept (the store holds them all).
    """

    def __init__(
        self,
        extractor: str,
        lessons: int = LESSONS,
        agreement_bound: float = AGREEMENT,
        check_share: float = MIN_CHECK_SHARE,
    ) -> None:
        self.extractor = extractor
        self.check_share = check_share
        self.lessons_needed = lessons
        self.agreement_bound = agreement_bound
        self._selectors: dict[str, dict[int, Selector]] = {}  # host -> template -> selector
        self._hosts: OrderedDict[str, _Host] = OrderedDict()
        self._offers: dict[str, Offers] = {}
        self._changed: dict[tuple[str, int], Selector] = {}
        self.foreign = 0

    # -- what a page of a host is sent with --------------------------------------------------------------
    def offers(self, host: str) -> Offers:
        """What a page of ``host`` is sent with (:class:`Offers`), kept until what it holds changes."""
        cached = self._offers.get(host)
        if cached is not None:
            return cached
        met = self._hosts.get(host)
        known = self._selectors.get(host, {})
        selectors = {
            template: Offer(
                template,
                selector.locator,
                selector.decisions,
                verify_share(selector.served, self.check_share),
                selector.state == "unstable",
                selector.kept_low,
                selector.conflicts,
            )
            for template, selector in known.items()
            if selector.state in ("active", "unstable")
        }
        retired = [template for template, selector in known.items() if selector.state == "retired"]
        parse, teach = (key_set(met.prekeys), key_set(met.teaching or ())) if met is not None else ((), ())
        made = Offers(
            selectors, parse, teach, frozenset(retired) if retired else frozenset(), self._parses_all(host, met)
        )
        # Kept where making them again costs (selectors, or bits): not for the many hosts of a broad crawl
        # met on a few pages, whose offers are a few keys.
        if known or type(parse) is bytes or type(teach) is bytes:
            self._offers[host] = made
        return made

    def _met(self, host: str, prekey: int | None, template: int | None) -> _Host:
        met = self._hosts.get(host)
        if met is None:
            met = self._hosts[host] = _Host()
            if len(self._hosts) > MAX_SEEN_HOSTS:
                self._offers.pop(self._hosts.popitem(last=False)[0], None)
        else:
            self._hosts.move_to_end(host)
        if prekey is not None and prekey not in met.prekeys:
            if len(met.prekeys) >= MAX_SEEN_TEMPLATES:  # a host of ever new pre-keys: start its set again
                met.prekeys.clear()
            met.prekeys.add(prekey)
            self._offers.pop(host, None)
        if template is not None:
            n = met.templates.pop(template, 0) + 1
            met.templates[template] = n
            self._count_parsed(host, met, template)
            if n == TEACHES_FROM - 1:
                if met.teaching is None:
                    met.teaching = set()
                met.teaching.add(template)
                self._offers.pop(host, None)
            if len(met.templates) > MAX_SEEN_TEMPLATES:
                met.forget_oldest_templates()
                self._offers.pop(host, None)
        return met

    def _parses_all(self, host: str, met: _Host | None) -> bool:
        """Whether every page of ``host`` is to be parsed, whatever its pre-key (:data:`PARSE_ALL_TRIAL`)."""
        if not any(selector.usable for selector in self._selectors.get(host, {}).values()):
            return False
        return met is None or met.parsed < PARSE_ALL_TRIAL or 2 * met.covered >= met.parsed

    def _count_parsed(self, host: str, met: _Host, template: int) -> None:
        """Count a page parsed for its template, and whether a selector was there for it; the host's kept
        offers are made again when they no longer say whether all its pages are parsed."""
        met.parsed += 1
        if self.active(host, template):
            met.covered += 1
        if met.parsed >= PARSE_ALL_WINDOW:
            met.parsed //= 2
            met.covered //= 2
        kept = self._offers.get(host)
        if kept is not None and kept.parse_all != self._parses_all(host, met):
            self._offers.pop(host, None)

    def retired(self, host: str, template: int) -> bool:
        """Whether the template's selector was retired here (or left to trafilatura): a worker's own
        selector for it is not to be trusted either."""
        selector = self._selectors.get(host, {}).get(template)
        return selector is not None and not selector.usable

    def active(self, host: str, template: int) -> bool:
        selector = self._selectors.get(host, {}).get(template)
        return selector is not None and selector.usable

    def selectors(self) -> list[Selector]:
        return [s for templates in self._selectors.values() for s in templates.values()]

    # -- what a page taught -------------------------------------------------------------------------------
    def observe(
        self,
        host: str,
        template: int | None,
        learned: str,
        taught: Lesson | None,
        prekey: int | None = None,
        agreement: float | None = None,
    ) -> str:
        """Take what a page's extraction found (``template``: its key, ``None`` when it was not parsed;
        ``learned``: ``replayed``, ``agreed``, ``disagreed``, or ``""`` for trafilatura alone; ``taught``:
        its lesson; ``prekey``: its :func:`prekey`; ``agreement``: a check's, :meth:`Selector.after_check`;
        a check without it counts as agreeing fully or not at all); returns what changed: ``learned`` (a new
        selector), ``extended``, ``retired``, ``unstable``, ``relearning`` (an unstable template learned
        again) or ``""``."""
        met = self._met(host, prekey, template)
        if template is None:
            return ""
        selector = self._selectors.get(host, {}).get(template)
        if selector is not None and selector.state == "unstable" and not learned:
            return self._waited(host, template, selector)
        if learned == "replayed" and selector is not None and selector.usable:
            self._put(replace(selector, served=selector.served + 1), offers=self._share_moves(selector))
            return ""
        if learned in ("agreed", "disagreed") and selector is not None and selector.usable:
            if agreement is None:
                agreement = 1.0 if learned == "agreed" else 0.0
            checked = selector.after_check(agreement, self.agreement_bound)
            if checked is not None:
                self._put(checked, offers=self._share_moves(selector))
                return ""
            retired = selector.retire()
            self._put(retired)
            if met.lessons:
                met.lessons.pop(template, None)
            return retired.state
        if taught is None or taught.agreement < self.agreement_bound:
            return ""
        if selector is not None and selector.usable:
            if taught.locator != selector.locator:
                return ""
            decisions, conflicts = merge(selector.decisions, selector.conflicts, taught.decisions)
            if decisions == selector.decisions and conflicts == selector.conflicts:
                return ""
            kept_low = min(selector.kept_low, taught.kept)
            self._put(replace(selector, decisions=decisions, conflicts=conflicts, kept_low=kept_low))
            return "extended"
        if selector is not None and selector.state == "unstable":
            return ""
        if met.lessons is None:
            met.lessons = {}
        gathered = met.lessons.setdefault(template, [])
        gathered.append(taught)
        agreeing = [x for x in gathered if x.locator == taught.locator]
        if len(agreeing) < self.lessons_needed:
            return ""
        del met.lessons[template]
        self._put(self._selector(host, template, agreeing, selector))
        return "learned"

    def _waited(self, host: str, template: int, selector: Selector) -> str:
        """One more page of an unstable template gone to trafilatura: counted on its selector (which the
        store keeps, so that the count runs on in the site's next crawls), and once
        :meth:`Selector.relearn_after` pages have, the template is retired instead, so that it teaches again
        (its retirements kept: one more short-lived selector leaves it unstable again)."""
        waited = selector.waited + 1
        if waited < selector.relearn_after():
            self._put(replace(selector, waited=waited), offers=False)
            return ""
        self._put(replace(selector, state="retired", waited=0))
        return "relearning"

    def waiting(self, host: str, template: int) -> int | None:
        """How many more pages of an unstable template go to trafilatura before it is learned again
        (``None``: it is not unstable here)."""
        selector = self._selectors.get(host, {}).get(template)
        if selector is None or selector.state != "unstable":
            return None
        return selector.relearn_after() - selector.waited

    def _selector(self, host: str, template: int, agreeing: list[Lesson], former: Selector | None) -> Selector:
        """A template's selector from the lessons that agree on where its article sits (its retirements
        carried over from the ``former`` one)."""
        decisions: dict[str, bool] = {}
        conflicts: frozenset[str] = frozenset()
        for one in agreeing:
            decisions, conflicts = merge(decisions, conflicts, one.decisions)
        return Selector(
            host,
            template,
            agreeing[0].locator,
            decisions,
            self.extractor,
            retired=former.retired if former is not None else 0,
            forgiven=former.forgiven if former is not None else 0,
            conflicts=conflicts,
            kept_low=min(one.kept for one in agreeing),
            checked=len(agreeing),
            missed=sum(max(0.0, 1.0 - one.agreement) for one in agreeing),
        )

    def _share_moves(self, selector: Selector) -> bool:
        """Whether one more page served changes the share of its pages checked (the host's offers are
        made again only then: they are pickled for every page of the host)."""
        return verify_share(selector.served + 1, self.check_share) != verify_share(selector.served, self.check_share)

    def _put(self, selector: Selector, offers: bool = True, changed: bool = True) -> None:
        self._selectors.setdefault(selector.host, {})[selector.template] = selector
        if changed:
            self._changed[(selector.host, selector.template)] = selector
        if offers:
            self._offers.pop(selector.host, None)

    # -- shared through the store ---------------------------------------------------------------------------
    def adopt(self, records: list[Selector]) -> int:
        """Take the store's selectors: one of another extractor is never used (counted in ``foreign``); a
        stored one replaces ours when we have none, or when it was retired more often (another process met
        a disagreement), or when ours is retired and it is not, or when both are unstable after as many
        retirements and it has waited longer (another process's pages of the template went to trafilatura
        meanwhile). Returns how many were taken."""
        taken = 0
        for record in records:
            if record.extractor != self.extractor:
                self.foreign += 1
                continue
            key = (record.host, record.template)
            ours = self._selectors.get(record.host, {}).get(record.template)
            if key in self._changed and (ours is None or ours.retired >= record.retired):
                continue  # ours is newer: it is saved next
            if (
                ours is None
                or record.retired > ours.retired
                or (not ours.usable and record.usable and record.retired >= ours.retired)
                or (
                    ours.state == record.state == "unstable"
                    and record.retired == ours.retired
                    and record.waited > ours.waited
                )
            ):
                self._put(record, changed=False)
                taken += 1
        return taken

    def take_changes(self) -> list[Selector]:
        """The selectors changed since the last call, for the store."""
        changed = list(self._changed.values())
        self._changed.clear()
        return changed


@dataclass(slots=True)
class _Host:
    """What the learner remembers of a host: the pre-keys of its pages, its templates met (key -> pages), those
    met often enough to teach, the lessons gathered for those without a selector, and how often a page parsed
    found a selector. A broad crawl meets
    most of its hosts on a few pages: a host holds only what it met, its containers made when first needed."""

    prekeys: set[int] = field(default_factory=set)
    templates: OrderedDict[int, int] = field(default_factory=OrderedDict)
    teaching: set[int] | None = None
    lessons: dict[int, list[Lesson]] | None = None
    #: Pages parsed for their template, and those of them whose template had a selector (PARSE_ALL_TRIAL).
    parsed: int = 0
    covered: int = 0

    def forget_oldest_templates(self) -> None:
        """Forget the least recently met half of the templates, with their lessons and their place among those
        that teach: half at a time, so that a host of ever new templates is trimmed once for every
        ``MAX_SEEN_TEMPLATES // 2`` templates."""
        for _ in range(len(self.templates) - MAX_SEEN_TEMPLATES // 2):
            template, _count = self.templates.popitem(last=False)
            if self.lessons:
                self.lessons.pop(template, None)
            if self.teaching:
                self.teaching.discard(template)
