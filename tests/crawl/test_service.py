"""The crawl side in-process (no ``scrapy crawl``): the downloader middleware's check of a response, step by
step, on a real store with real extraction threads or a real worker process, each answer a typed value (a
``Verdict``, a ``Skip``, an ``Outcome``). What needs the network and the scheduler (declared pages fetched
first, probes, URL rules skipping requests) is tested by real crawls."""

from __future__ import annotations

import logging
import os
import signal

import pytest
from helpers.inprocess import InProcess
from helpers.sitegen import article_page, print_page
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, Request

from scrapy_neardup import NearDupDownloaderMiddleware, NearDupPipeline
from scrapy_neardup.crawl.screening import Skip, response_job, text_job
from scrapy_neardup.crawl.storethread import Outcome
from scrapy_neardup.engine.detector import Verdict
from scrapy_neardup.engine.prepare import Prepared

#: Tag mode, and no request of the plugin's own: no engine downloads here.
QUIET = {
    "NEARDUP_ACTION": "tag",
    "NEARDUP_SOFT404": False,
    "NEARDUP_CANONICAL_FETCH": "none",
    "NEARDUP_URL_RULES": "off",
}


def response(url: str, body: str) -> HtmlResponse:
    return HtmlResponse(url, body=body.encode(), encoding="utf-8", request=Request(url))


@pytest.fixture
def harness(tmp_path, request):
    settings = {"NEARDUP_STORE_URL": f"sqlite:///{tmp_path / 'store.sqlite3'}", "NEARDUP_WORKERS": 0, **QUIET}
    settings.update(getattr(request, "param", {}))
    running = InProcess(**settings)
    yield running
    running.close()


def check(harness: InProcess, middleware, url: str, body: str):
    """The middleware's answer to one response: the response (tagged or not) or the IgnoreRequest raised, and
    the verdict it wrote to the request's meta."""
    request = Request(url)
    try:
        answer = harness.run(middleware.process_response(request, response(url, body)))
    except IgnoreRequest as exc:
        answer = exc
    return answer, request.meta.get("neardup")


def test_a_response_is_prepared_decided_settled_and_tagged_in_the_order_given(harness):
    middleware = NearDupDownloaderMiddleware.from_crawler(harness.crawler)
    first, meta = check(harness, middleware, "http://a.test/1", article_page(1))
    assert meta["status"] == "unique" and "near-duplicate" not in first.flags
    copy, meta = check(harness, middleware, "http://a.test/print/1", print_page(1))
    assert meta["status"] == "duplicate" and meta["canonical"] == "http://a.test/1"
    assert "near-duplicate" in copy.flags
    other, meta = check(harness, middleware, "http://a.test/2", article_page(2))
    assert meta["status"] == "unique"
    again, meta = check(harness, middleware, "http://a.test/1", article_page(1))
    assert meta["status"] == "seen"
    stats = harness.stats()
    assert stats["neardup/unique"] == 2 and stats["neardup/duplicate"] == 1 and stats["neardup/tagged"] == 1
    assert stats["neardup/checked"] == 4


@pytest.mark.parametrize("harness", [{"NEARDUP_ACTION": "drop"}], indirect=True)
def test_drop_mode_raises_ignore_request_for_the_copy_only(harness):
    middleware = NearDupDownloaderMiddleware.from_crawler(harness.crawler)
    check(harness, middleware, "http://a.test/1", article_page(1))
    dropped, meta = check(harness, middleware, "http://a.test/copy", article_page(1, extra="<p>Ad</p>"))
    assert isinstance(dropped, IgnoreRequest) and "near-duplicate of http://a.test/1" in str(dropped)
    assert meta["status"] == "duplicate"
    assert harness.stats()["neardup/dropped"] == 1


def test_each_step_answers_with_a_typed_value(harness):
    service = harness.service
    job = response_job(response("http://a.test/1", article_page(1)), service.config.max_body_size)
    prepared = harness.run(service.prepare("http://a.test/1", job, "http://a.test/1"))
    assert isinstance(prepared, Prepared) and prepared.fingerprint is not None
    outcome = harness.run(service.decide("http://a.test/1", "http://a.test/1", prepared, None))
    assert isinstance(outcome, Outcome) and isinstance(outcome.result, Verdict)
    assert service.settle("http://a.test/1", outcome).status == "unique"
    # A document with too little text: prepared, then a skip from the decision, counted once by its reason.
    short = harness.run(service.prepare("t", text_job("too short"), None))
    assert isinstance(short, Prepared) and short.fingerprint is None
    skipped = service.settle("t", harness.run(service.decide("t", None, short, None)))
    assert isinstance(skipped, Skip) and skipped.reason in ("too_little_text", "no_text", "no_words")
    # A body screened out before any work.
    empty = harness.run(service.prepare("e", response_job(response("http://a.test/e", " "), 100), None))
    assert empty == Skip("empty")
    stats = harness.stats("neardup/skipped/")
    assert stats == {f"neardup/skipped/{skipped.reason}": 1, "neardup/skipped/empty": 1}


def test_a_store_that_fails_under_a_decision_passes_the_page_on_with_its_reason(harness):
    middleware = NearDupDownloaderMiddleware.from_crawler(harness.crawler)
    check(harness, middleware, "http://a.test/1", article_page(1))
    store = harness.service.store_thread.detector.store
    store._db.close()  # the SQLite connection goes away under the store
    answer, meta = check(harness, middleware, "http://a.test/2", article_page(2))
    assert meta == {"status": "skipped", "reason": "store_error"} and answer.url == "http://a.test/2"
    assert harness.stats()["neardup/store_error"] == 1


def test_after_the_spider_closed_a_response_is_skipped_as_store_closed(tmp_path):
    running = InProcess(NEARDUP_STORE_URL=f"sqlite:///{tmp_path / 's.sqlite3'}", NEARDUP_WORKERS=0, **QUIET)
    middleware = NearDupDownloaderMiddleware.from_crawler(running.crawler)
    running.close()
    _, meta = check(running, middleware, "http://a.test/1", article_page(1))
    assert meta == {"status": "skipped", "reason": "store_closed"}
    assert running.stats("neardup/skipped/") == {"neardup/skipped/store_closed": 1}


def test_a_worker_killed_under_a_page_costs_that_page_only(tmp_path):
    running = InProcess(NEARDUP_STORE_URL=f"sqlite:///{tmp_path / 's.sqlite3'}", NEARDUP_WORKERS=1, **QUIET)
    try:
        middleware = NearDupDownloaderMiddleware.from_crawler(running.crawler)
        _, meta = check(running, middleware, "http://a.test/1", article_page(1))
        assert meta["status"] == "unique"
        (pid,) = running.service.worker_pids()
        os.kill(pid, signal.SIGKILL)
        request = Request("http://a.test/2")
        running.run(middleware.process_response(request, response("http://a.test/2", article_page(2))))
        # The kill is met by this page or, if the pool saw the worker gone first, by none.
        meta = request.meta["neardup"]
        assert meta == {"status": "skipped", "reason": "worker_lost"} or meta["status"] == "unique"
        _, meta = check(running, middleware, "http://a.test/print/1", print_page(1))
        assert meta["status"] == "duplicate" and meta["canonical"] == "http://a.test/1"
        assert running.service.worker_pids() and running.service.worker_pids() != [pid]
    finally:
        running.close()


@pytest.mark.parametrize("nice", [None, 10])
def test_the_crawls_workers_run_at_the_niceness_neardup_worker_nice_gives(tmp_path, nice):
    """The crawl's workers, read back from the kernel after a real page: at the crawler's niceness plus
    ``NEARDUP_WORKER_NICE`` (its default when unset)."""
    from scrapy_neardup.settings import default_of

    given = {} if nice is None else {"NEARDUP_WORKER_NICE": nice}
    running = InProcess(NEARDUP_STORE_URL=f"sqlite:///{tmp_path / 's.sqlite3'}", NEARDUP_WORKERS=1, **given, **QUIET)
    try:
        middleware = NearDupDownloaderMiddleware.from_crawler(running.crawler)
        _, meta = check(running, middleware, "http://a.test/1", article_page(1))
        assert meta["status"] == "unique"
        (pid,) = running.service.worker_pids()
        expected = min(
            19, os.getpriority(os.PRIO_PROCESS, 0) + (default_of("NEARDUP_WORKER_NICE") if nice is None else nice)
        )
        assert os.getpriority(os.PRIO_PROCESS, pid) == expected
    finally:
        running.close()


def test_the_item_pipeline_checks_an_items_text_through_the_same_three_steps(tmp_path):
    running = InProcess(NEARDUP_STORE_URL="memory://", NEARDUP_WORKERS=0, NEARDUP_ITEM_FIELD="body", **QUIET)
    try:
        pipeline = NearDupPipeline.from_crawler(running.crawler)
        text = " ".join(f"word{i % 97} other{i % 13}" for i in range(300))
        first = running.run(pipeline.process_item({"url": "http://a.test/1", "body": text}))
        copy = running.run(pipeline.process_item({"url": "http://a.test/2", "body": text + " and one more"}))
        assert "near_duplicate_of" not in first and copy["near_duplicate_of"] == "http://a.test/1"
        assert running.stats()["neardup/tagged"] == 1
    finally:
        running.close()


@pytest.mark.parametrize("harness", [{"NEARDUP_GROUP_BUDGET": 1}], indirect=True)
def test_the_store_threads_lookups_answer_what_the_decisions_filed(harness):
    middleware = NearDupDownloaderMiddleware.from_crawler(harness.crawler)
    check(harness, middleware, "http://a.test/1", article_page(1))
    check(harness, middleware, "http://a.test/print/1", print_page(1))
    lookups = harness.service.store_thread
    assert harness.run(lookups.known("http://a.test/1", "http://a.test/none")) == [True, False]
    assert harness.run(lookups.fetched_now("http://a.test/1")) is True
    assert harness.run(lookups.fetched_now("http://a.test/none")) is False
    # A group's budget of one copy: the first copy asking is admitted, and stays admitted; the next is not.
    assert harness.run(lookups.admitted("http://a.test/1", "http://a.test/print/1", 1)) is True
    assert harness.run(lookups.admitted("http://a.test/1", "http://a.test/amp/1", 1)) is False
    assert harness.run(lookups.admitted("http://a.test/1", "http://a.test/print/1", 1)) is True
    harness.close()
    assert harness.run(lookups.known("http://a.test/1")) is None  # closed: the store cannot say


def test_a_lookup_that_fails_is_answered_as_if_the_store_could_not_say_and_counted(harness, caplog):
    """A fault of the plugin's own (here a lookup of no key) is logged with its traceback once for its kind;
    a failing store (its table gone) only at DEBUG, the decisions meet it; both are counted."""
    middleware = NearDupDownloaderMiddleware.from_crawler(harness.crawler)
    check(harness, middleware, "http://a.test/1", article_page(1))
    lookups = harness.service.store_thread
    with caplog.at_level(logging.DEBUG, logger="scrapy_neardup"):
        assert harness.run(lookups.known(None)) is None  # type: ignore[arg-type]
        assert harness.run(lookups.fetched_now(None)) is None  # type: ignore[arg-type]
        errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(errors) == 1 and errors[0].levelno == logging.ERROR and errors[0].exc_info
        assert "TypeError" in errors[0].getMessage()
        caplog.clear()
        lookups.detector.store.db.execute("DROP TABLE docs")
        assert harness.run(lookups.known("http://a.test/1")) is None
        assert harness.run(lookups.fetched_now("http://a.test/1")) is None
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r for r in caplog.records if "a store lookup failed" in r.getMessage()]
    assert lookups.lookup_failures == 4
    harness.close()
    assert harness.stats()["neardup/store/lookup_failures"] == 4
