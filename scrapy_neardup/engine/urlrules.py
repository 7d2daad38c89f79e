"""URL rewrite rules learned from the verdicts: which URLs of a host lead to a page already met.

A site repeats its duplicate-making URL patterns thousands of times (tracking parameters, ``/amp/`` and
``/print/`` versions, ``index.html``, ``www.`` and ``http``/``https`` variants), and the crawl's own verdicts
are the labels that reveal them. This follows the DUST line of work (Bar-Yossef, Keidar, Schonfeld, "Do not
crawl in the DUST", WWW 2007), which mines rules "different URLs, similar text" from a crawl log, with the
rewrite rules of Dasgupta, Kumar and Sasturkar ("De-duping URLs via rewrite rules", KDD 2008) restricted to
the atomic rewrites below, and MaybeDont's online estimate per host (a rule is used once the duplicates it
predicted were duplicates often enough, and a fraction of its predictions is still fetched to keep checking).

* A rule is **proposed** by a near-duplicate verdict whose URL becomes its canonical's URL by a set of atomic
  rewrites (:func:`explain`): each rewrite of the set is a rule of the copy's host.
* A rule is **tried** whenever a page is decided whose URL the rules of its host rewrite into the URL of a
  page already decided: a success of every rule of that rewrite when both pages are in one group (the same
  canonical), a failure otherwise (:meth:`RuleBook.trial_steps`, :meth:`RuleBook.record`). Either page may
  be the alias: an original fetched after its alias is its near-duplicate, and tries the rules from the
  alias's side. A page's own verdict is the ground truth: the prediction is never what makes it true.
* A rule is **applied** (:meth:`RuleBook.rewrites`) once it has ``min_support`` successes and its estimated
  success rate, ``(successes + 1) / (trials + 2)`` (Laplace's rule of succession), is at least
  ``min_confidence``. A rule that fails is retired at its first failure: from then on it needs
  :data:`FAILED_CONFIDENCE` on that host, about fifty successes a failure, so that a parameter that matters
  now and then (an edited revision that is another page) is not used however often it succeeds; or it comes
  back once it holds again, its successes in a row since its last failure confident on their own at that bar
  (:meth:`RuleBook.held_again`), so that a few broken copies met early do not retire it for good.
* A rule **learns across hosts**: sites share their duplicate-making patterns (``utm_source``, ``amp``,
  ``print``), so a rule confident on at least ``prior_hosts`` other hosts lends its pooled success rate to a
  new host as a prior of ``PRIOR_WEIGHT`` trials (the empirical-Bayes estimate of a rate shared by groups:
  Efron and Morris, 1975). On the new host it is then used after ``prior_support`` successes of its own,
  while its estimate ``(successes + a + 1) / (trials + PRIOR_WEIGHT + 2)`` stays at ``min_confidence`` and
  it has not failed there: at its first failure on the host it is retired there, until its own counts make
  it confident. A rule is never used on a host where it never succeeded: a host whose ``/amp/`` paths are
  other pages never proposes ``prefix:amp``.
* A used rule is **explored**: a share of its predictions is fetched anyway, to keep trying it
  (:meth:`RuleBook.explore_share`): more while it is young, ``explore`` once it has held.

Nothing here knows Scrapy or a store: the counts are kept by the caller (:class:`RuleCounts` crossing to the
store), and the rules are plain names (``param:utm_source``) so that they can be stored, merged across
processes and listed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .urlshape import PRIOR_SEGMENTS, is_tracking

#: The kinds of rule, in the order :meth:`RuleBook.rewrites` applies them.
KINDS = ("scheme", "www", "index", "prefix", "suffix", "param", "slash")
#: Last path segments that stand for their directory.
INDEX_NAMES = frozenset({"index.html", "index.htm", "index.php", "default.aspx", "default.asp", "index.shtml"})
#: Path segments a prefix or suffix rule may drop: short words, not identifiers (an article's slug or number
#: in a path is content, never a variant marker).
_SEGMENT = re.compile(r"^[a-z][a-z0-9_-]{0,15}$")


@dataclass(frozen=True, order=True)
class UrlRule:
    """One atomic rewrite: ``kind`` (:data:`KINDS`) and its argument (a parameter's name, a path segment).

    * ``scheme``: ``http`` becomes ``https``; ``www``: a leading ``www.`` is dropped from the host;
    * ``index``: a last path segment ``arg`` (``index.html``) is dropped, its directory kept;
    * ``prefix``/``suffix``: a first/last path segment ``arg`` (``amp``, ``print``) is dropped;
    * ``param``: the query parameter ``arg`` is dropped;
    * ``slash``: a trailing slash is dropped from a path other than ``/``.
    """

    kind: str
    arg: str = ""

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.arg}" if self.arg else self.kind

    @classmethod
    def parse(cls, name: str) -> UrlRule:
        kind, _, arg = name.partition(":")
        if kind not in KINDS:
            raise ValueError(f"not a URL rule: {name!r}")
        return cls(kind, arg)

    def apply(self, url: str) -> str | None:
        """``url`` rewritten by this rule, or ``None`` when the rule does not change it."""
        parts = urlsplit(url)
        host, path, query = parts.netloc, parts.path or "/", parts.query
        scheme = parts.scheme
        if self.kind == "scheme":
            if scheme != "http":
                return None
            scheme = "https"
        elif self.kind == "www":
            if not host.lower().startswith("www."):
                return None
            host = host[4:]
        elif self.kind == "index":
            head, _, last = path.rpartition("/")
            if last != self.arg:
                return None
            path = head + "/"
        elif self.kind in ("prefix", "suffix"):
            segments = path.split("/")
            if self.kind == "prefix":
                if len(segments) < 3 or segments[1] != self.arg:
                    return None
                path = "/" + "/".join(segments[2:])
            else:
                end = len(segments) - (2 if segments[-1] == "" else 1)
                if end < 2 or segments[end] != self.arg:
                    return None
                path = "/".join(segments[:end]) + ("/" if segments[-1] == "" else "")
        elif self.kind == "param":
            pairs = parse_qsl(query, keep_blank_values=True)
            kept = [(k, v) for k, v in pairs if k != self.arg]
            if len(kept) == len(pairs):
                return None
            query = urlencode(kept)
        elif self.kind == "slash":
            if path == "/" or not path.endswith("/"):
                return None
            path = path.rstrip("/") or "/"
        return urlunsplit((scheme, host, path, query, ""))


def in_order(rules: Iterable[UrlRule]) -> list[UrlRule]:
    """Rules in the order they are applied: by :data:`KINDS`, then argument."""
    return sorted(rules, key=lambda r: (KINDS.index(r.kind), r.arg))


def _steps(url: str, rules: Iterable[UrlRule]) -> list[tuple[str, tuple[UrlRule, ...]]]:
    """``url`` rewritten by each of ``rules`` in turn (those that change it): every step's URL with the
    rules applied so far."""
    current, used, out = url, [], []
    for rule in rules:
        rewritten = rule.apply(current)
        if rewritten is None:
            continue
        current = rewritten
        used.append(rule)
        out.append((current, tuple(used)))
    return out


@lru_cache(maxsize=4096)
def host_of(url: str) -> str:
    """The host a rule belongs to: lower case, without ``www.`` (a ``www`` rule serves both). Cached: a
    page's URL is asked for its host at each step of its check."""
    host = (urlsplit(url).hostname or "").lower()
    return host[4:] if host.startswith("www.") else host


def same_host(a: str, b: str) -> bool:
    """Two URLs of one host and port, with or without ``www.``."""
    try:
        return host_of(a) == host_of(b) and urlsplit(a).port == urlsplit(b).port
    except ValueError:  # a port that is not a number
        return False


def _same(a: str, b: str) -> bool:
    """Two URLs alike but for the order of their query parameters and a fragment."""
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.netloc.lower(), pa.path or "/", sorted(parse_qsl(pa.query, keep_blank_values=True))) == (
        pb.scheme,
        pb.netloc.lower(),
        pb.path or "/",
        sorted(parse_qsl(pb.query, keep_blank_values=True)),
    )


def explain(copy_url: str, canonical_url: str) -> list[UrlRule]:
    """The atomic rules that, applied to ``copy_url``, make it ``canonical_url``; empty when no set of them
    does (another path, another host, a parameter the canonical has and the copy has not)."""
    if host_of(copy_url) != host_of(canonical_url) or _same(copy_url, canonical_url):
        return []
    copy, canonical = urlsplit(copy_url), urlsplit(canonical_url)
    rules: list[UrlRule] = []
    if copy.scheme == "http" and canonical.scheme == "https":
        rules.append(UrlRule("scheme"))
    elif copy.scheme != canonical.scheme:
        return []
    if copy.netloc.lower() != canonical.netloc.lower():
        if copy.netloc.lower() != "www." + canonical.netloc.lower():
            return []
        rules.append(UrlRule("www"))
    copy_params = parse_qsl(copy.query, keep_blank_values=True)
    canonical_params = set(parse_qsl(canonical.query, keep_blank_values=True))
    if not canonical_params <= set(copy_params):
        return []
    rules += [UrlRule("param", name) for name in sorted({k for k, v in copy_params if (k, v) not in canonical_params})]
    rules += _path_rules(copy.path or "/", canonical.path or "/")
    steps = _steps(copy_url, in_order(set(rules)))
    rewritten = steps[-1][0] if steps else copy_url
    return sorted(set(rules)) if _same(rewritten, canonical_url) else []


def _path_rules(copy: str, canonical: str) -> list[UrlRule]:
    if copy == canonical:
        return []
    rules: list[UrlRule] = []
    head, _, last = copy.rpartition("/")
    if last in INDEX_NAMES and head + "/" in (canonical, canonical.rstrip("/") + "/"):
        rules.append(UrlRule("index", last))
        copy = head + "/"
    if copy.rstrip("/") == canonical.rstrip("/") and copy != canonical:
        return [*rules, UrlRule("slash")] if copy.endswith("/") and copy != "/" else []
    segments = copy.strip("/").split("/")
    target = canonical.strip("/")
    if len(segments) >= 2 and _SEGMENT.match(segments[0]) and "/".join(segments[1:]) == target:
        rules.append(UrlRule("prefix", segments[0]))
    elif len(segments) >= 2 and _SEGMENT.match(segments[-1]) and "/".join(segments[:-1]) == target:
        rules.append(UrlRule("suffix", segments[-1]))
    elif copy != canonical and not rules:
        return []
    return rules


class RuleCount(NamedTuple):
    """What a rule of a host has done: its successes and failures. A :class:`RuleBook` keeps each as a plain
    ``(successes, failures)`` tuple, which the garbage collector stops tracking (a broad crawl counts rules
    on a hundred thousand hosts, and every full collection of its process would walk them): this is one read
    (:meth:`RuleBook.count_of`)."""

    successes: int = 0
    failures: int = 0

    @property
    def trials(self) -> int:
        return self.successes + self.failures

    @property
    def confidence(self) -> float:
        return confidence(self.successes, self.failures)


def confidence(successes: int, failures: int) -> float:
    """Laplace's estimate of the chance that a rule's next prediction is right."""
    return (successes + 1) / (successes + failures + 2)


#: Trials a prior from other hosts counts for (see the module's docstring).
PRIOR_WEIGHT = 50
#: The estimated success rate a rule that has failed on a host needs there to be used again: about fifty
#: successes a failure (MaybeDont's bar). A rule that never failed needs ``min_confidence``.
FAILED_CONFIDENCE = 0.98
#: Successes on its host after which a rule is explored at the floor share (``explore``); below, more.
EXPLORE_MATURE = 20
#: The largest share of a young rule's predictions fetched anyway.
EXPLORE_MAX = 0.5

#: ``(host, rule name) -> (successes, failures)``: what crosses to and from a store.
RuleCounts = Mapping[tuple[str, str], tuple[int, int]]
#: ``(successes, failures)`` as a :class:`RuleBook` keeps them.
_Count = tuple[int, int]
_NONE: _Count = (0, 0)


@dataclass(frozen=True)
class Prediction:
    """A request's URL rewritten by the confident rules of its host: into a URL already decided
    (``decided``; ``group``, the page its group reaches the spider through), or, when none of its rewrites
    was, into the last of them (the URL the rules say holds the page: to be fetched in its place).
    ``explore``: the share of such predictions fetched anyway (:meth:`RuleBook.explore_share`);
    ``group_fetched``: the group's page was fetched in this crawl already (set by the crawl)."""

    url: str
    target: str
    rules: tuple[str, ...]
    decided: bool = True
    group: str | None = None
    explore: float = 0.0
    group_fetched: bool = False


@dataclass(frozen=True)
class CuratedRules:
    """Hand-written rules (a team's, in duplicate-url-discarder's rule files): the rules of each domain
    (a host and its subdomains, ``www.`` aside), used from the first page, and the entries of the files that
    no rule here expresses (said, not applied)."""

    rules: Mapping[str, tuple[UrlRule, ...]]
    left: tuple[str, ...] = ()

    def of(self, host: str) -> tuple[UrlRule, ...]:
        """The rules of ``host`` (as :func:`host_of` gives it): its domain's and every parent domain's."""
        if not self.rules:
            return ()
        found: list[UrlRule] = []
        labels = host.split(".")
        for i in range(len(labels)):
            found += self.rules.get(".".join(labels[i:]), ())
        return tuple(dict.fromkeys(found))


#: duplicate-url-discarder's processors this reads, and the rules each stands for.
_DUD_NORMALIZER = (UrlRule("www"), UrlRule("slash"))


def read_dud_rules(text: str, source: str = "rules") -> CuratedRules:
    """The rules of a duplicate-url-discarder rule file (JSON: a list of ``{"processor", "args",
    "urlPattern": {"include": [...]}}``), as atomic rules of each domain its ``include`` patterns name:
    ``queryRemoval`` drops each parameter of ``args``; ``subpathRemoval`` with ``args`` ``[0]`` and a pattern
    ``host/segment/`` drops that first path segment; ``normalizer`` drops ``www.`` and a trailing slash.
    Other entries (other processors, patterns these cannot express, ``exclude`` patterns) are listed in
    ``left``. Raises ``ValueError`` naming ``source`` for a file that is not such a list."""
    import json

    try:
        entries = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{source}: not JSON ({exc})") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{source}: not a list of duplicate-url-discarder rules (objects)")
    rules: dict[str, list[UrlRule]] = {}
    left: list[str] = []
    for number, entry in enumerate(entries, 1):
        processor, args = entry.get("processor"), entry.get("args") or []
        pattern = entry.get("urlPattern") or {}
        includes = pattern.get("include") if isinstance(pattern, dict) else None
        if not isinstance(includes, list) or not includes or (isinstance(pattern, dict) and pattern.get("exclude")):
            left.append(f"{source} rule {number} ({processor}): a URL pattern this cannot express")
            continue
        for include in includes:
            domain, _, path = str(include).lower().removeprefix("https://").removeprefix("http://").partition("/")
            domain = domain.removeprefix("www.").removeprefix("*.")
            made: list[UrlRule] = []
            if processor == "queryRemoval" and not path and all(isinstance(a, str) and a for a in args):
                made = [UrlRule("param", a) for a in args]
            elif processor == "subpathRemoval" and args == [0] and _SEGMENT.match(path.rstrip("/")):
                made = [UrlRule("prefix", path.rstrip("/"))]
            elif processor == "normalizer" and not path:
                made = list(_DUD_NORMALIZER)
            if not made or not domain or "*" in domain:
                left.append(f"{source} rule {number} ({processor}, {include}): no URL rule here expresses it")
                continue
            rules.setdefault(domain, []).extend(made)
    return CuratedRules({d: tuple(dict.fromkeys(r)) for d, r in rules.items()}, tuple(left))


class RuleBook:
    """The rules of every host and their counts, with the thresholds that make one confident.

    Not thread-safe: the crawl keeps it on its store thread; :meth:`merge` takes what every process counted
    (from the store), :meth:`merge_changed` what changed there since, :meth:`pending` gives what this one
    counted since it last gave it. Each count changed updates the pooled counts of its rule and the hosts a
    rule may be used on (:attr:`candidates`) in place: a broad crawl counts rules on a hundred thousand hosts,
    and nothing done a page may walk them all."""

    def __init__(
        self,
        min_support: int = 20,
        min_confidence: float = 0.98,
        prior_hosts: int = 0,
        prior_support: int = 3,
        explore: float = 0.0,
        curated: CuratedRules | None = None,
    ) -> None:
        #: Hand-written rules: used from the first page, tried and counted as the learned ones, and retired
        #: on a host at their first failure there as a learned rule is.
        self.curated = curated or CuratedRules({})
        self.min_support = min_support
        self.min_confidence = min_confidence
        self.prior_hosts = prior_hosts
        self.prior_support = prior_support
        self.explore = explore
        #: Each host's rules, by name, and their counts, ``(successes, failures)``: strings and plain tuples of
        #: numbers, which the garbage collector stops tracking (dicts of them too, at its next full collection).
        self.counts: dict[str, dict[str, _Count]] = {}
        #: The one object of each rule counted, by name.
        self._rules: dict[str, UrlRule] = {}
        self._pending: dict[tuple[str, str], list[int]] = {}
        #: Per rule: the hosts where it is confident on its own counts, and its counts over every host.
        self._pooled: dict[UrlRule, _Pool] = {}
        #: The hosts where a learned rule has the successes a use needs (its own ``min_support``, or
        #: ``prior_support`` with a prior): a prediction is asked for only there (and where hand-written rules
        #: are); whether a rule is used is then decided on its counts (:meth:`confident`).
        self.candidates: set[str] = set()
        #: Per host and rule, its successes in a row since its last failure, in this process's trials: a rule
        #: that failed comes back once they alone make it confident (:meth:`held_again`).
        self._streaks: dict[tuple[str, str], int] = {}
        self._candidate_from = min(min_support, prior_support) if prior_hosts > 0 else min_support

    def count_of(self, host: str, rule: UrlRule) -> RuleCount:
        """``rule``'s counts on ``host`` (none: zero)."""
        return RuleCount(*self.counts.get(host, {}).get(rule.name, _NONE))

    def rules_of(self, host: str) -> list[UrlRule]:
        """The learned rules counted on ``host`` (tried or only proposed there)."""
        return [self._rule(name) for name in self.counts.get(host, {})]

    def _rule(self, name: str) -> UrlRule:
        """The rule named ``name`` (``ValueError``: no rule of this version has that name)."""
        rule = self._rules.get(name)
        if rule is None:
            rule = self._rules[name] = UrlRule.parse(name)
        return rule

    def merge(self, counts: RuleCounts) -> None:
        """Take the counts of the store (every process's), replacing this book's."""
        book: dict[str, dict[str, _Count]] = {}
        for (host, name), (successes, failures) in counts.items():
            try:
                self._rule(name)
            except ValueError:  # a rule of a later version (or an earlier version's counter): not ours to apply
                continue
            book.setdefault(host, {})[name] = (int(successes), int(failures))
        for (host, name), (successes, failures) in self._pending.items():
            rules = book.setdefault(host, {})
            had = rules.get(name, _NONE)
            rules[name] = (had[0] + successes, had[1] + failures)
        pooled: dict[UrlRule, _Pool] = {}
        candidates: set[str] = set()
        for host, rules in book.items():
            for name, count in rules.items():
                self._counted(host, self._rule(name), count, _NONE, pooled, candidates)
        # Whole, each at once: the reactor reads the candidates while a remote store's thread merges.
        self.counts, self._pooled, self.candidates = book, pooled, candidates

    def merge_changed(self, counts: RuleCounts) -> None:
        """Take the store's counts of the rules ``counts`` names (those changed since the last read), each
        replacing this book's, with what this book counted and has not given yet added."""
        for (host, name), (successes, failures) in counts.items():
            try:
                rule = self._rule(name)
            except ValueError:
                continue
            mine = self._pending.get((host, name), (0, 0))
            rules = self.counts.setdefault(host, {})
            before = rules.get(name, _NONE)
            count = rules[name] = (int(successes) + mine[0], int(failures) + mine[1])
            self._counted(host, rule, count, before)

    def _counted(
        self,
        host: str,
        rule: UrlRule,
        count: _Count,
        before: _Count,
        pooled: dict[UrlRule, _Pool] | None = None,
        candidates: set[str] | None = None,
    ) -> None:
        """``host``'s ``count`` of ``rule`` changed from ``before``: its rule's pooled counts and the
        candidates follow (this book's, or those :meth:`merge` makes anew)."""
        pooled = self._pooled if pooled is None else pooled
        candidates = self.candidates if candidates is None else candidates
        pool = pooled.get(rule)
        if pool is None:
            pool = pooled[rule] = _Pool()
        pool.successes += count[0] - before[0]
        pool.failures += count[1] - before[1]
        own = self._own(count)
        if own != self._own(before):
            if own:
                pool.hosts.add(host)
            else:
                pool.hosts.discard(host)
        if count[0] >= self._candidate_from:
            candidates.add(host)

    def pending(self) -> dict[tuple[str, str], tuple[int, int]]:
        """What this book counted since the last call (to add to the store), and forget it."""
        out = {key: (value[0], value[1]) for key, value in self._pending.items()}
        self._pending.clear()
        return out

    def propose(self, copy_url: str, canonical_url: str) -> list[UrlRule]:
        """A near-duplicate verdict: the rules that explain its URL become rules of its host (no count yet:
        they are counted when tried)."""
        rules = explain(copy_url, canonical_url)
        host = host_of(copy_url)
        known = self.counts.setdefault(host, {})
        for rule in rules:
            name = rule.name
            if name not in known:
                known[name] = _NONE
                self._rules.setdefault(name, rule)
                self._pending.setdefault((host, name), [0, 0])
        return rules

    def trial_steps(self, url: str) -> list[tuple[str, tuple[UrlRule, ...]]]:
        """What ``url`` becomes by every rule of its host (confident or not), each applied once in order:
        each step's URL with the rules that made it. A trial takes the first step that was decided: all its
        rules together succeed or fail (two tracking parameters are dropped together, or not at all)."""
        host = host_of(url)
        return _steps(url, in_order(set(self.rules_of(host)) | set(self.curated.of(host))))

    def record(self, url: str, rule: UrlRule, success: bool) -> None:
        """One trial of ``rule`` on ``url``'s host."""
        host = host_of(url)
        rules, name = self.counts.setdefault(host, {}), rule.name
        rule = self._rules.setdefault(name, rule)
        before = rules.get(name, _NONE)
        pending = self._pending.setdefault((host, name), [0, 0])
        if success:
            count = (before[0] + 1, before[1])
            pending[0] += 1
            self._streaks[(host, name)] = self._streaks.get((host, name), 0) + 1
        else:
            count = (before[0], before[1] + 1)
            pending[1] += 1
            self._streaks[(host, name)] = 0
        rules[name] = count
        self._counted(host, rule, count, before)

    def _own(self, count: _Count) -> bool:
        """Confident on its host's counts alone (``count``: successes and failures): ``min_confidence`` while
        it never failed there, and :data:`FAILED_CONFIDENCE` (or ``min_confidence``, when higher) once it
        did."""
        successes, failures = count
        return successes >= self.min_support and confidence(successes, failures) >= self._bar(failures > 0)

    def _bar(self, failed: bool) -> float:
        """The confidence a rule needs on a host: ``min_confidence``, and once it ``failed`` there
        :data:`FAILED_CONFIDENCE` (or ``min_confidence``, when higher)."""
        return max(self.min_confidence, FAILED_CONFIDENCE) if failed else self.min_confidence

    def prior_confidence(self, host: str, rule: UrlRule) -> float | None:
        """The rule's estimated success rate on ``host`` with the prior of the other hosts where it is
        confident; ``None`` when fewer than ``prior_hosts`` lend one."""
        if self.prior_hosts <= 0:
            return None
        pool = self._pooled.get(rule)
        if pool is None:
            return None
        successes, failures = self.counts.get(host, {}).get(rule.name, _NONE)
        if len(pool.hosts) - (host in pool.hosts) < self.prior_hosts:
            return None
        others_s, others_f = pool.successes - successes, pool.failures - failures
        prior_s = PRIOR_WEIGHT * (others_s + 1) / (others_s + others_f + 2)
        return (successes + prior_s + 1) / (successes + failures + PRIOR_WEIGHT + 2)

    def held_again(self, host: str, rule: UrlRule) -> bool:
        """Whether a rule that failed on ``host`` has held since: its successes in a row since its last failure
        there (in this process's trials) make it confident on their own, at the bar a failed rule needs. A few
        broken copies met early then retire a rule until it holds again, not for good."""
        streak = self._streaks.get((host, rule.name), 0)
        return streak >= self.min_support and confidence(streak, 0) >= self._bar(failed=True)

    def why_unused(self, host: str, rule: UrlRule) -> str:
        """Why a prediction on ``host`` may not use ``rule`` (``""``: it may), in a few words for a listing."""
        count = self.counts.get(host, {}).get(rule.name, _NONE)
        if self.used(host, rule, count):
            return ""
        successes, failures = count
        if failures:
            bar = self._bar(failed=True)
            has = confidence(successes, failures)
            streak = self._streaks.get((host, rule.name), 0)
            return (
                f"failed {failures} times here: it needs confidence {bar:g} (has {has:.3f}), or to hold again "
                f"since its last failure ({streak} successes in a row so far)"
            )
        if successes < self.min_support:
            return f"{successes} successes of the {self.min_support} it needs"
        return f"confidence {confidence(successes, failures):.3f}, below {self.min_confidence:g}"

    def used(self, host: str, rule: UrlRule, count: _Count) -> bool:
        """Whether a prediction on ``host`` may use ``rule`` (with ``count``, its successes and failures
        there)."""
        if self._own(count):
            return True
        if count[1] and self.held_again(host, rule):
            return True
        if count[1] or count[0] < self.prior_support:
            return False  # the prior serves a rule that has not failed here: one failure, and it is on its own
        prior = self.prior_confidence(host, rule)
        return prior is not None and prior >= self.min_confidence

    def confident(self, host: str) -> list[UrlRule]:
        """The rules of ``host`` a prediction may use, in the order they are applied: the learned ones it
        is confident of, and the hand-written ones that did not fail there."""
        counts = self.counts.get(host, {})
        learned = {rule for name, count in counts.items() if self.used(host, rule := self._rule(name), count)}
        curated = {rule for rule in self.curated.of(host) if not counts.get(rule.name, _NONE)[1] or rule in learned}
        return in_order(learned | curated)

    def explore_share(self, url: str, rules: Iterable[str]) -> float:
        """The share of the predictions a prediction by ``rules`` (names) on ``url``'s host belongs to that is
        fetched anyway: ``explore`` once each rule has ``EXPLORE_MATURE`` successes there (a hand-written
        rule is taken as held), more while one is young (``explore * EXPLORE_MATURE / successes``, at most
        ``EXPLORE_MAX``)."""
        if self.explore <= 0:
            return 0.0
        host = host_of(url)
        counts, curated = self.counts.get(host, {}), self.curated.of(host)
        youngest = min(
            (EXPLORE_MATURE if self._rule(name) in curated else counts.get(name, _NONE)[0] for name in rules),
            default=0,
        )
        return min(EXPLORE_MAX, self.explore * max(1.0, EXPLORE_MATURE / max(youngest, 1)))

    def likely_page(self, url: str, unused: Collection[str] = ()) -> tuple[str, tuple[str, ...]] | None:
        """The URL ``url`` is most likely a copy of, to fetch and decide first (a guess the content then
        confirms or not, as a declared canonical): ``url`` rewritten by its host's confident rules and by the
        priors every site shares (its tracking parameters dropped, an ``amp`` or ``print`` first or last
        segment dropped: :data:`PRIOR_SEGMENTS`) that have not failed on its host, nor are named in ``unused``;
        with the names of the rules used. ``None`` when none rewrites it."""
        host = host_of(url)
        counts = self.counts.get(host, {})
        confident = self.confident(host)
        parts = urlsplit(url)
        priors = [
            UrlRule("param", name) for name, _ in parse_qsl(parts.query, keep_blank_values=True) if is_tracking(name)
        ]
        priors += [UrlRule(kind, segment) for kind in ("prefix", "suffix") for segment in PRIOR_SEGMENTS]
        rules = set(confident) | {
            rule for rule in priors if not counts.get(rule.name, _NONE)[1] and rule.name not in unused
        }
        steps = _steps(url, in_order(rules))
        if not steps:
            return None
        target, used = steps[-1]
        return target, tuple(rule.name for rule in used)

    def rewrites(self, url: str) -> list[Prediction]:
        """What ``url`` becomes by its host's confident rules, each applied once in order: every step's URL
        with the rules that made it, shortest first. The caller asks its store which of them was decided
        already (one lookup for all); the first one that was is the prediction."""
        return [
            Prediction(url, target, tuple(rule.name for rule in used))
            for target, used in _steps(url, self.confident(host_of(url)))
        ]

    def listing(self) -> list[tuple[str, UrlRule, RuleCount, bool]]:
        """Every learned rule (hand-written ones are listed apart) with its host, its counts, and whether a
        prediction may use it (on its own counts or with the other hosts' prior)."""
        out = []
        for host, rules in sorted(self.counts.items()):
            used, curated = set(self.confident(host)), set(self.curated.of(host))
            out += [
                (host, rule, RuleCount(*count), rule in used)
                for rule, count in sorted((self._rule(name), count) for name, count in rules.items())
                if rule not in curated
            ]
        return out


class _Pool:
    """A rule's counts over every host, and the hosts where it is confident on its own counts."""

    __slots__ = ("hosts", "successes", "failures")

    def __init__(self) -> None:
        self.hosts: set[str] = set()
        self.successes = 0
        self.failures = 0


class SharedRuleCounts(Protocol):
    """Where the counts of every process meet: a store's ``rules`` (:mod:`scrapy_neardup.store.parts`)."""

    def add(self, counts: RuleCounts) -> None: ...

    def read(self) -> dict[tuple[str, str], tuple[int, int]]: ...

    def read_changed(self, mark: int | None) -> tuple[dict[tuple[str, str], tuple[int, int]], int]: ...


#: How often a learner reads every count of the store again, not only those changed since its last read, in
#: seconds (so that counts a process added without numbering them, one of a former version, are taken too).
FULL_READ_SECS = 600.0


class Learner:
    """A crawl's URL rules, kept in step with the counts ``shared`` by every process (its store's): it
    proposes and tries rules on every decided page, predicts, and every ``sync_every`` pages or ``sync_secs``
    seconds (and at :meth:`sync`) adds its counts there and takes everyone's, so that the processes of a crawl
    use a rule at about the same time. ``group_of`` says which group a URL was filed in (``None``: not decided
    yet). Not thread-safe: the crawl calls it on its store thread, under the store's lock."""

    def __init__(
        self,
        book: RuleBook,
        shared: SharedRuleCounts,
        group_of: Callable[[str], str | None],
        sync_every: int = 200,
        sync_secs: float = 2.0,
    ) -> None:
        self.book = book
        self.shared = shared
        self.group_of = group_of
        self.sync_every = sync_every
        self.sync_secs = sync_secs
        self._since_sync = 0
        self._synced_at = self._read_all = time.monotonic()
        counts, self._mark = shared.read_changed(None)
        self.book.merge(counts)

    def observe(self, key: str, status: str, canonical: str, displaced: str | None = None) -> bool:
        """A page was decided: filed as ``canonical``'s near-duplicate (``status`` ``duplicate``, or ``seen``
        with a canonical other than itself), or as its own group; ``displaced``: the group's former canonical
        page, when this page took the group from it (a better copy, see :mod:`.bestcopy`). A page whose key is
        not its URL is not observed (the caller leaves it out). Whether the book was synchronised with the
        store."""
        group = key if displaced else canonical if status in ("duplicate", "seen") and canonical else key
        near = displaced or (canonical if status == "duplicate" else None)
        if near:
            # Either URL may be the alias: the original fetched after its alias is its near-duplicate.
            self.book.propose(key, near)
            self.book.propose(near, key)
            for target, rules in self.book.trial_steps(near):
                if target == key:
                    for rule in rules:
                        self.book.record(near, rule, True)
                    break
        for target, rules in self.book.trial_steps(key):
            target_group = self.group_of(target)
            if target_group is not None and target != key:
                for rule in rules:
                    self.book.record(key, rule, target_group == group)
                break
        self._since_sync += 1
        if self._since_sync >= self.sync_every or time.monotonic() - self._synced_at >= self.sync_secs:
            self.sync()
            return True
        return False

    def predict(self, url: str) -> Prediction | None:
        """The first rewrite of ``url`` by its host's confident rules that was decided already; else the
        last one, not decided (``None`` when no confident rule rewrites it)."""
        rewrites = self.book.rewrites(url)
        for prediction in rewrites:
            group = self.group_of(prediction.target)
            if group is not None:
                return replace(prediction, group=group, explore=self.book.explore_share(url, prediction.rules))
        return replace(rewrites[-1], decided=False) if rewrites else None

    def sync(self) -> None:
        """Add this process's counts to the store's and take what every process added since the last sync
        (every count again each ``FULL_READ_SECS``)."""
        self._since_sync = 0
        now = self._synced_at = time.monotonic()
        pending = self.book.pending()
        if pending:
            self.shared.add(pending)
        if now - self._read_all >= FULL_READ_SECS:
            counts, self._mark = self.shared.read_changed(None)
            self.book.merge(counts)
            self._read_all = now
        else:
            counts, self._mark = self.shared.read_changed(self._mark)
            self.book.merge_changed(counts)
