"""The books of a crawl (scrapy_neardup.store.books): JSON records read field by field, grouped by crawl."""

from scrapy_neardup.store import MemoryStore
from scrapy_neardup.store.books import CrawlBooks, Soft404Page, added_up, crawls_of


def test_books_round_trip_and_a_foreign_record_is_passed_over():
    books = CrawlBooks(
        10.0,
        20.0,
        "h:1",
        checked=5,
        cpu_seconds=1.25,
        hosts={"a.com": {"soft404": 2}},
        soft404_pages=(Soft404Page("http://a.com/x", "http://a.com/neardup-no-such-page-1", 0.9),),
    )
    assert CrawlBooks.from_json(books.to_json()) == books
    later = CrawlBooks.from_json('{"started": 1, "finished": 2, "checked": 3, "a_field_of_a_later_version": 1}')
    assert later is not None and later.checked == 3
    for foreign in ("[]", "not json", '{"started": "soon", "finished": 2}', '{"finished": 2}'):
        assert CrawlBooks.from_json(foreign) is None
    store = MemoryStore()
    store.books.add(books)
    store.books._records.append("garbage")  # a record that does not read as books
    assert store.books.read() == [books]


def test_overlapping_books_are_one_crawl_added_up():
    one = CrawlBooks(0, 100, "a", checked=10, hosts={"x": {"soft404": 1}})
    two = CrawlBooks(50, 120, "b", checked=5, hosts={"x": {"soft404": 2}, "y": {"avoided": 3}})
    later = CrawlBooks(200, 300, "a", checked=7)
    runs = crawls_of([later, two, one])
    assert [[b.process for b in run] for run in runs] == [["a", "b"], ["a"]]
    total = added_up(runs[0])
    assert (total.started, total.finished, total.checked, total.process) == (0, 120, 15, "2 processes")
    assert total.hosts == {"x": {"soft404": 3}, "y": {"avoided": 3}} and total.soft404_hosts == 1
