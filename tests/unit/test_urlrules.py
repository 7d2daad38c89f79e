"""URL rules learned from verdicts (scrapy_neardup.engine.urlrules): proposed by near-duplicate verdicts,
tried on every page whose URL they rewrite into a URL decided before, used once confident."""

import pytest

from scrapy_neardup.engine.urlrules import Learner, RuleBook, RuleCount, UrlRule, explain
from scrapy_neardup.store import MemoryStore


@pytest.mark.parametrize(
    ("copy", "canonical", "rules"),
    [
        ("https://a.com/x?utm_source=t&id=1", "https://a.com/x?id=1", ["param:utm_source"]),
        (
            "https://a.com/x?id=1&utm_source=t&utm_medium=m",
            "https://a.com/x?id=1",
            ["param:utm_medium", "param:utm_source"],
        ),
        ("https://a.com/amp/news/x", "https://a.com/news/x", ["prefix:amp"]),
        ("https://a.com/news/x/print", "https://a.com/news/x", ["suffix:print"]),
        ("https://a.com/news/x/print/", "https://a.com/news/x/", ["suffix:print"]),
        ("http://www.a.com/x/index.html", "https://a.com/x/", ["index:index.html", "scheme", "www"]),
        ("https://a.com/x/", "https://a.com/x", ["slash"]),
        # Not explained: another path, another value, a number dropped from the path, another host.
        ("https://a.com/x", "https://a.com/y", []),
        ("https://a.com/x?id=2", "https://a.com/x?id=1", []),
        ("https://a.com/2020/x", "https://a.com/x", []),
        ("https://b.com/x", "https://a.com/x", []),
        ("https://a.com/x", "https://a.com/x?id=1", []),
        ("https://a.com/x?b=1&a=2", "https://a.com/x?a=2&b=1", []),
    ],
)
def test_explain_finds_the_atomic_rewrites_of_a_copys_url(copy, canonical, rules):
    assert [r.name for r in explain(copy, canonical)] == rules


def test_each_rule_rewrites_only_what_it_names():
    assert UrlRule("param", "utm_source").apply("https://a.com/x?utm_source=1&b=2") == "https://a.com/x?b=2"
    assert UrlRule("param", "utm_source").apply("https://a.com/x?b=2") is None
    assert UrlRule("prefix", "amp").apply("https://a.com/amp/x") == "https://a.com/x"
    assert UrlRule("prefix", "amp").apply("https://a.com/amp") is None  # the whole path is not a prefix
    assert UrlRule("suffix", "print").apply("https://a.com/x/print") == "https://a.com/x"
    assert UrlRule("suffix", "print").apply("https://a.com/print") is None
    assert UrlRule("www").apply("https://www.a.com/x") == "https://a.com/x"
    assert UrlRule("scheme").apply("https://a.com/x") is None
    assert UrlRule.parse("param:utm_source") == UrlRule("param", "utm_source")
    with pytest.raises(ValueError):
        UrlRule.parse("regex:.*")


def test_a_rule_is_used_once_it_has_its_support_and_retired_by_one_failure():
    book = RuleBook(min_support=3, min_confidence=0.8)
    rule = UrlRule("param", "utm_source")
    assert book.propose("https://a.com/1?utm_source=x", "https://a.com/1") == [rule]
    for _ in range(2):
        book.record("https://a.com/2?utm_source=x", rule, True)
    assert book.confident("a.com") == []  # two successes: under the support
    book.record("https://a.com/3?utm_source=x", rule, True)
    assert book.confident("a.com") == [rule]  # 4/5 = 0.8
    assert [p.target for p in book.rewrites("https://a.com/9?utm_source=y&k=1")] == ["https://a.com/9?k=1"]
    assert book.rewrites("https://b.com/9?utm_source=y") == []  # another host has its own rules
    book.record("https://a.com/4?utm_source=x", rule, False)
    assert book.confident("a.com") == []  # 4/6: retired at once
    assert RuleCount(50, 1).confidence < 0.98 < RuleCount(50, 0).confidence


def test_the_learner_tries_rules_on_the_verdicts_and_shares_its_counts_through_the_store():
    """Two processes (two learners) on one store: each proposes, tries and counts; after a sync each has the
    other's counts. A page whose rewritten URL is in another group is a failure."""
    store = MemoryStore()
    groups = {}

    def group_of(url):
        return groups.get(url)

    one = Learner(RuleBook(min_support=2, min_confidence=0.7), store.rules, group_of, sync_every=1000)
    two = Learner(RuleBook(min_support=2, min_confidence=0.7), store.rules, group_of, sync_every=1000)
    rule = UrlRule("param", "ref")
    for i in range(3):
        groups[f"https://a.com/{i}"] = f"https://a.com/{i}"
        one.observe(f"https://a.com/{i}", "unique", f"https://a.com/{i}")
        groups[f"https://a.com/{i}?ref=x"] = f"https://a.com/{i}"
        one.observe(f"https://a.com/{i}?ref=x", "duplicate", f"https://a.com/{i}")
    # The first alias proposed the rule and was its first success (its verdict is ground truth); the
    # next two were its trials.
    assert one.book.count_of("a.com", rule) == RuleCount(3, 0)
    assert one.predict("https://a.com/0?ref=y").target == "https://a.com/0"
    # Its rewrite was never decided: the prediction is that URL, to fetch in its place.
    assert one.predict("https://a.com/77?ref=y").decided is False
    assert one.predict("https://a.com/77?ref=y").target == "https://a.com/77"
    assert one.predict("https://a.com/77") is None  # no confident rule rewrites it
    one.sync()
    two.sync()
    assert two.book.count_of("a.com", rule) == RuleCount(3, 0)
    # A page the rule maps onto another group: a failure, counted by the second process.
    groups["https://a.com/5"] = "https://a.com/5"
    groups["https://a.com/5?ref=z"] = "https://a.com/5?ref=z"
    two.observe("https://a.com/5?ref=z", "unique", "https://a.com/5?ref=z")
    two.sync()
    one.sync()
    assert one.book.count_of("a.com", rule) == RuleCount(3, 1)
    assert store.rules.read()[("a.com", "param:ref")] == (3, 1)


def _succeed(book, host, rule, times):
    for i in range(times):
        book.record(f"https://{host}/{i}?utm_source=x", rule, True)


def test_a_rule_confident_on_other_hosts_is_used_on_a_new_one_after_a_few_successes_and_retired_by_a_failure():
    rule = UrlRule("param", "utm_source")
    book = RuleBook(min_support=8, min_confidence=0.9, prior_hosts=2, prior_support=3)
    for host in ("a.com", "b.com"):
        _succeed(book, host, rule, 9)  # (9 + 1) / (9 + 2) = 0.909: confident on its own counts
    assert book.confident("a.com") == [rule] and book.confident("b.com") == [rule]
    _succeed(book, "c.com", rule, 2)
    assert book.confident("c.com") == []  # two successes: under the prior's support
    _succeed(book, "c.com", rule, 1)
    assert book.confident("c.com") == [rule]  # three, with the prior of a.com and b.com
    assert book.prior_confidence("c.com", rule) > 0.9
    book.record("https://c.com/x?utm_source=y", rule, False)
    assert book.confident("c.com") == []  # a failure there retires it there
    assert book.confident("a.com") == [rule]
    # Never on a host where it never succeeded, whatever the others say.
    assert book.confident("d.com") == []
    # One other host is not enough.
    alone = RuleBook(min_support=8, min_confidence=0.9, prior_hosts=2, prior_support=3)
    _succeed(alone, "a.com", rule, 9)
    _succeed(alone, "c.com", rule, 5)
    assert alone.confident("c.com") == []


def test_a_prior_from_hosts_that_failed_often_lends_no_confidence():
    rule = UrlRule("param", "sid")
    book = RuleBook(min_support=8, min_confidence=0.9, prior_hosts=2, prior_support=3)
    for host in ("a.com", "b.com"):
        _succeed(book, host, rule, 30)
    for host in ("e.com", "f.com", "g.com"):  # where sid is a section: it failed
        for i in range(20):
            book.record(f"https://{host}/{i}?sid=1", rule, False)
    _succeed(book, "c.com", rule, 3)
    assert book.confident("c.com") == []  # the pooled rate of the other hosts is 60/120


def test_young_rules_are_explored_more_and_held_ones_at_the_floor():
    rule = UrlRule("param", "utm_source")
    book = RuleBook(min_support=3, min_confidence=0.8, explore=0.02)
    _succeed(book, "a.com", rule, 4)
    young = book.explore_share("https://a.com/x?utm_source=1", ["param:utm_source"])
    _succeed(book, "a.com", rule, 40)
    held = book.explore_share("https://a.com/x?utm_source=1", ["param:utm_source"])
    assert young == pytest.approx(0.02 * 20 / 4) and held == pytest.approx(0.02)
    assert RuleBook(explore=0.0).explore_share("https://a.com/x", ["param:utm_source"]) == 0.0
    from scrapy_neardup.crawl.predictions import explored

    # A smaller share explores a subset of a larger one's URLs (the same ones in every process and crawl).
    urls = [f"https://a.com/{i}?utm_source=x" for i in range(2000)]
    small, large = {u for u in urls if explored(u, held)}, {u for u in urls if explored(u, young)}
    assert small <= large and 10 < len(small) < 80 and 150 < len(large) < 350


def test_a_rule_that_fails_now_and_then_is_not_used_however_often_it_succeeds():
    """``?rev=`` on neardup-dev: most revisions are near-duplicates, some are other pages. 79 successes and 7
    failures clear a confidence of 0.9, but a rule that failed needs 0.98 on its host."""
    rule = UrlRule("param", "rev")
    book = RuleBook(min_support=8, min_confidence=0.9)
    _succeed(book, "a.com", rule, 79)
    assert book.confident("a.com") == [rule]
    for i in range(7):
        book.record(f"https://a.com/{i}?rev=2", rule, False)
    assert book.count_of("a.com", rule).confidence > 0.9 and book.confident("a.com") == []
    _succeed(book, "a.com", rule, 400)  # (479 + 1) / (486 + 2) = 0.984: trusted again
    assert book.confident("a.com") == [rule]


def test_a_duplicate_url_discarder_file_reads_back_as_the_rules_it_was_written_from():
    import json

    from scrapy_neardup.engine.urlrules import CuratedRules, read_dud_rules
    from scrapy_neardup.offline.cli import dud_rules

    written, left = dud_rules(
        [
            ("news.example", UrlRule("param", "utm_source")),
            ("news.example", UrlRule("param", "fbclid")),
            ("news.example", UrlRule("prefix", "amp")),
            ("blog.example", UrlRule("www")),
            ("blog.example", UrlRule("suffix", "print")),
        ]
    )
    assert left == ["blog.example suffix:print"]
    curated = read_dud_rules(json.dumps(written))
    assert set(curated.of("news.example")) == {
        UrlRule("param", "utm_source"),
        UrlRule("param", "fbclid"),
        UrlRule("prefix", "amp"),
    }
    assert set(curated.of("blog.example")) == {UrlRule("www"), UrlRule("slash")}
    # A domain's rules serve its subdomains; other domains get none.
    assert UrlRule("prefix", "amp") in curated.of("m.news.example") and curated.of("news.example.org") == ()
    odd = read_dud_rules(
        json.dumps([{"processor": "queryRemovalExcept", "args": ["id"], "urlPattern": {"include": ["a.example"]}}]),
        "team.json",
    )
    assert odd == CuratedRules({}, ("team.json rule 1 (queryRemovalExcept, a.example): no URL rule here expresses it",))
    with pytest.raises(ValueError, match="team.json: not a list"):
        read_dud_rules('{"processor": "queryRemoval"}', "team.json")


def test_hand_written_rules_are_used_at_once_and_retired_on_a_host_at_their_first_failure():
    from scrapy_neardup.engine.urlrules import CuratedRules, RuleBook

    book = RuleBook(min_support=8, min_confidence=0.9, curated=CuratedRules({"a.example": (UrlRule("param", "ref"),)}))
    assert [p.target for p in book.rewrites("https://a.example/x?ref=1")] == ["https://a.example/x"]
    assert book.explore_share("https://a.example/x?ref=1", ["param:ref"]) == 0.0  # no exploration configured
    book.record("https://a.example/y?ref=2", UrlRule("param", "ref"), False)
    assert book.rewrites("https://a.example/x?ref=1") == []
    assert book.listing() == []  # listed apart, not among the learned rules


def test_the_counts_kept_in_place_give_what_a_book_made_from_all_counts_gives():
    """The pooled counts, the hosts a rule is confident on and the candidate hosts are kept as each count
    changes (a trial, another process's counts merged since the last read): the same rules are used on every
    host as in a book that merged every count at once."""
    import random

    rng = random.Random(7)
    rules = [UrlRule("param", "utm_source"), UrlRule("prefix", "amp"), UrlRule("param", "sid")]
    hosts = [f"h{i}.com" for i in range(12)]
    store = MemoryStore()
    kept = Learner(RuleBook(min_support=6, min_confidence=0.85, prior_hosts=2, prior_support=2), store.rules, {}.get)
    other = RuleBook(min_support=6, min_confidence=0.85, prior_hosts=2, prior_support=2)
    for step in range(3000):
        # Hosts met ever more rarely: the last ones have a few trials, where a rule is used by its prior.
        host, rule = hosts[min(int(rng.expovariate(0.3)), len(hosts) - 1)], rng.choice(rules)
        book = kept.book if step % 3 else other  # another process counts a third of the trials
        odds = 0.5 if host in ("h2.com", "h5.com") else 0.998 if rule.kind == "param" else 0.8
        book.record(f"https://{host}/{step}?x=1", rule, rng.random() < odds)
        if step % 50 == 0:
            store.rules.add(other.pending())
            kept.sync()
    for i in range(2):  # a host met twice: its rule is used by the prior the other hosts lend it
        other.record(f"https://few.com/{i}?utm_source=x", rules[0], True)
    hosts.append("few.com")
    store.rules.add(other.pending())
    kept.sync()
    whole = RuleBook(min_support=6, min_confidence=0.85, prior_hosts=2, prior_support=2)
    whole.merge(store.rules.read())
    assert {h: kept.book.counts[h] for h in hosts} == {h: whole.counts[h] for h in hosts}
    assert [kept.book.confident(h) for h in hosts] == [whole.confident(h) for h in hosts]
    assert any(whole.confident(h) for h in hosts) and not all(whole.confident(h) for h in hosts)
    assert kept.book.candidates == whole.candidates
    pooled = {r: (p.hosts, p.successes, p.failures) for r, p in kept.book._pooled.items()}
    assert pooled == {r: (p.hosts, p.successes, p.failures) for r, p in whole._pooled.items()}
    assert any(not whole._own(whole.counts[h][r.name]) for h in hosts for r in whole.confident(h))  # by a prior
    assert {h for h in hosts if whole.confident(h)} <= whole.candidates


def test_a_sync_reads_what_changed_since_the_last_not_every_count():
    """A broad crawl counts rules on a hundred thousand hosts: a sync (every 200 pages) takes only the counts
    added since the last one, so its cost does not grow with the crawl."""
    from scrapy_neardup.store.parts import InProcessRuleCounts

    class Shared(InProcessRuleCounts):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def read_changed(self, mark):
            counts, after = super().read_changed(mark)
            self.sizes.append((mark is None, len(counts)))
            return counts, after

    shared = Shared()
    shared.add({(f"h{i}.com", "param:utm_source"): (3, 0) for i in range(5000)})
    learner = Learner(RuleBook(), shared, {}.get)
    assert shared.sizes == [(True, 5000)]
    for i in range(10):
        learner.book.record(f"https://h{i}.com/a?utm_source=x", UrlRule("param", "utm_source"), True)
    learner.sync()
    assert shared.sizes[-1] == (False, 10)
    assert learner.book.count_of("h3.com", UrlRule("param", "utm_source")) == RuleCount(4, 0)
    learner.sync()
    assert shared.sizes[-1] == (False, 0)


def test_the_books_counts_are_nothing_the_collector_walks():
    """A broad crawl's book counts rules on a hundred thousand hosts: every object of it the garbage collector
    tracked (a count, a rule made again for each host, a host's dict) would be walked by each full collection
    of the crawl's process, on the reactor."""
    import gc

    book = RuleBook(min_support=2, min_confidence=0.6)
    rules = [UrlRule("param", "utm_source"), UrlRule("suffix", "print")]
    for i in range(40):
        host = f"h{i}.example"
        book.propose(f"http://{host}/a?utm_source=x", f"http://{host}/a")
        for n in range(3):
            book.record(f"http://{host}/{n}?utm_source=x", UrlRule("param", "utm_source"), n != 1)
            book.record(f"http://{host}/{n}/print", UrlRule.parse("suffix:print"), True)
    book.merge({("other.example", "param:utm_source"): (5, 0), **{k: tuple(v) for k, v in book.pending().items()}})
    book.merge_changed({("h1.example", "suffix:print"): (9, 1)})
    gc.collect()  # a dict of strings and untracked tuples is let go at a full collection
    assert not any(gc.is_tracked(counts) for counts in book.counts.values())
    assert {id(rule) for host in book.counts for rule in book.rules_of(host)} == {id(r) for r in book._rules.values()}
    assert sorted(book._rules) == sorted(rule.name for rule in rules)
    assert book.count_of("h1.example", rules[1]) == (9, 1)  # the store's: this book gave its own before
    assert book.count_of("h2.example", rules[0]).confidence == pytest.approx(3 / 5)
    assert book.confident("h2.example") == [rules[1]]  # utm_source failed once there: it needs 0.98


def test_a_rule_retired_by_a_few_broken_copies_comes_back_once_it_holds_again():
    """``prefix:amp`` met seven broken AMP copies early (218 successes, 7 failures: 0.965, under the 0.98 a
    failed rule needs): it is retired, and says why, until its successes since its last failure make it
    confident on their own (48 in a row at 0.98); a rule failing every tenth trial never comes back."""
    rule = UrlRule("prefix", "amp")
    book = RuleBook(min_support=20, min_confidence=0.98)
    for i in range(7):
        book.record(f"https://a.com/amp/broken/{i}", rule, False)
    _succeed(book, "a.com", rule, 218)  # retired on its counts alone, but 218 in a row since
    assert book.confident("a.com") == [rule] and book.why_unused("a.com", rule) == ""
    book.record("https://a.com/amp/broken/8", rule, False)
    assert book.confident("a.com") == []
    assert book.why_unused("a.com", rule).startswith("failed 8 times here: it needs confidence 0.98 (has 0.961)")
    _succeed(book, "a.com", rule, 47)
    assert book.confident("a.com") == [] and "(47 successes in a row so far)" in book.why_unused("a.com", rule)
    _succeed(book, "a.com", rule, 1)
    assert book.confident("a.com") == [rule]
    other = UrlRule("param", "rev")
    for n in range(300):
        book.record(f"https://b.com/{n}?rev=2", other, n % 10 != 9)
    assert book.confident("b.com") == [] and book.why_unused("b.com", other).startswith("failed 30 times")
    fresh = UrlRule("param", "ref")
    _succeed(book, "c.com", fresh, 5)
    assert book.why_unused("c.com", fresh) == "5 successes of the 20 it needs"
