"""The name a group goes by in a crawl's items (scrapy_neardup.crawl.groups): one name from its first item on,
whatever the store re-points, and never the name of a page emitted as a near-duplicate."""

from scrapy_neardup.crawl.groups import GroupNames
from scrapy_neardup.engine.detector import Verdict


def test_a_group_keeps_the_name_of_its_first_page_through_re_pointing():
    names = GroupNames()
    assert names.note(Verdict("unique", "/print/a", "/print/a", 1.0)) == "/print/a"
    # The article takes the group (a better copy) after the print view reached the spider: it is tagged as
    # the print view's copy, and the copies decided after it, filed under the article, keep that name.
    article = Verdict("duplicate", "/a", "/print/a", 0.98, displaced="/print/a")
    assert names.note(article) == "/print/a"
    assert names.note(Verdict("duplicate", "/a?utm_source=x", "/a", 1.0)) == "/print/a"
    assert names.of(Verdict("duplicate", "/a?utm_source=x", "/a", 1.0)) == "/print/a"
    # A re-crawl's seen copy names the store's page when no item named the group before in this crawl.
    assert GroupNames().note(Verdict("seen", "/print/a", "/a", 0.98)) == "/a"


def test_a_better_copy_of_a_group_met_in_an_earlier_crawl_joins_the_name_its_copies_carry():
    names = GroupNames()
    assert names.note(Verdict("seen", "/amp/b", "/old/b", 1.0)) == "/old/b"  # a copy named after /old/b
    better = Verdict("unique", "/b", "/b", 1.0, displaced="/old/b")  # /old/b not fetched in this crawl
    assert names.note(better) == "/old/b"
    assert names.note(Verdict("duplicate", "/b?ref=x", "/b", 1.0)) == "/old/b"
    # With no copy named after the former page yet, the better copy is its group's name.
    assert GroupNames().note(Verdict("unique", "/c", "/c", 1.0, displaced="/old/c")) == "/c"


def test_soft404_pages_and_the_bound():
    names = GroupNames(limit=2)
    assert names.note(Verdict("soft404", "/gone/1", "/neardup-no-such-page-x", 0.9)) == "/neardup-no-such-page-x"
    for n in range(5):
        names.note(Verdict("duplicate", f"/copy/{n}", f"/page/{n}", 1.0))
    assert len(names) == 2  # the least recently named forgotten
