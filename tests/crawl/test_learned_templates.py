"""Learned templates in real crawls (NEARDUP_LEARN_TEMPLATES): a site of three templates crawled with its
selectors learned, the same verdicts as trafilatura alone, a second crawl that starts warm, and a template
that changes mid-crawl."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import uuid
from types import SimpleNamespace

import pytest
from helpers.crawlkit import ServerThread, crawl_tagged, pages_server, paths_crawl_command, read_result
from helpers.redis_server import one_server_kind
from helpers.sitegen import templated_page

pytestmark = pytest.mark.slow

PER_TEMPLATE = 20
LINKS = "<p>" + " ".join(f"<a href='/n/{k}'>newsletter offer {k}</a>" for k in range(40)) + "</p>"


def site(changed_from: int | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Three templates of one host, 20 articles each; every seventh article crossposted into the next
    template, every fifth mirrored. ``changed_from``: articles of template 0 from this one on carry a
    paragraph of links inside the article (trafilatura drops it; a selector learned before keeps it).
    Returns the pages and each copy's article page."""
    pages, copy_of = {}, {}
    for t in range(3):
        for k in range(PER_TEMPLATE):
            n = t * PER_TEMPLATE + k
            extra = LINKS if changed_from is not None and t == 0 and k >= changed_from else ""
            path = f"/t{t}/article-{n}.html"
            pages[path] = templated_page(t, n, extra_block=extra)
            if n % 7 == 3:
                other = (t + 1) % 3
                pages[f"/t{other}/story-{n}.html"] = templated_page(other, 1000 + n, article_seed=n)
                copy_of[f"/t{other}/story-{n}.html"] = path
            elif n % 5 == 4:
                pages[f"/mirror{path}"] = pages[path]
                copy_of[f"/mirror{path}"] = path
    return pages, copy_of


def groups(result) -> set[frozenset[str]]:
    """The groups the crawl's tags make: each tagged item with the page it names."""
    out: dict[str, set[str]] = {}
    for item in result.items:
        canonical = item.get("near_duplicate_of")
        canonical_path = "/" + canonical.split("/", 3)[3] if canonical else None
        if canonical_path and canonical_path != item["path"]:  # (a re-crawl tags a group's page as seen)
            out.setdefault(canonical_path, {canonical_path}).add(item["path"])
    return {frozenset(g) for g in out.values()}


def expected(copy_of: dict[str, str]) -> set[frozenset[str]]:
    out: dict[str, set[str]] = {}
    for copy, article in copy_of.items():
        out.setdefault(article, {article}).add(copy)
    return {frozenset(g) for g in out.values()}


def folder(tmp_path, name: str):
    path = tmp_path / name
    path.mkdir(exist_ok=True)
    return path


def shuffled(pages: dict[str, str], seed: int) -> dict[str, str]:
    order = list(pages)
    random.Random(seed).shuffle(order)
    return {path: pages[path] for path in order}


@pytest.mark.parametrize("seed", [1, 2])
def test_a_template_rich_site_is_extracted_by_learned_selectors_with_trafilatura_s_verdicts(tmp_path, seed):
    pages, copy_of = site()
    pages = shuffled(pages, seed)
    few_at_once = {"CONCURRENT_REQUESTS": "4"}  # 80 pages: the first 16 would all be in workers before any lesson
    learned = crawl_tagged(folder(tmp_path, "on"), pages, few_at_once)
    alone = crawl_tagged(folder(tmp_path, "off"), pages, {"NEARDUP_LEARN_TEMPLATES": "False", **few_at_once})
    for result in (learned, alone):
        assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
        assert len(result.items) == len(pages)
    assert groups(learned) == groups(alone) == expected(copy_of), (groups(learned), learned.neardup_stats())
    stats = learned.neardup_stats()
    assert stats["neardup/learned/learned"] >= 3 and stats["neardup/learned/selectors"] == 3, stats
    assert stats.get("neardup/learned/replayed", 0) >= len(pages) // 3, stats
    assert "neardup/learned/replayed" not in alone.neardup_stats()
    # The next crawl on the same store starts warm: every template's selector is there before its first page.
    again = crawl_tagged(folder(tmp_path, "on"), pages, few_at_once, name="again")
    warm = again.neardup_stats()
    assert warm["neardup/learned/adopted"] == 3, warm
    assert "neardup/learned/trafilatura" not in warm and "neardup/learned/learned" not in warm, warm
    assert warm.get("neardup/learned/replayed", 0) >= len(pages) // 2, warm


def test_a_template_that_changes_mid_crawl_retires_its_selector_and_loses_no_verdict(tmp_path):
    """Template 0 starts carrying a paragraph of links inside the article after its eighth page (its first
    two are not parsed, the next two only counted, three teach): a selector learned before keeps it,
    trafilatura drops it; the checks (half of the pages here) find the disagreement, the
    selector is retired, and every verdict is still trafilatura's, the pages replayed before it included."""
    pages, copy_of = site(changed_from=8)
    first = {p: pages[p] for p in pages if p.startswith("/t0/article-") and int(p.split("-")[1][:-5]) < 8}
    rest = shuffled({p: pages[p] for p in pages if p not in first}, 3)
    ordered = {**first, **rest}
    settings = {"NEARDUP_LEARN_CHECK_SHARE": "0.5", "CONCURRENT_REQUESTS": "1"}
    learned = crawl_tagged(folder(tmp_path, "on"), ordered, settings)
    alone = crawl_tagged(folder(tmp_path, "off"), ordered, {"NEARDUP_LEARN_TEMPLATES": "False"})
    assert learned.returncode == 0 and "Traceback" not in learned.log, learned.log[-3000:]
    stats = learned.neardup_stats()
    assert stats.get("neardup/learned/retired", 0) + stats.get("neardup/learned/unstable", 0) >= 1, stats
    assert "is retired: a check against trafilatura disagreed" in learned.log
    assert stats.get("neardup/learned/disagreed", 0) >= 1, stats
    assert groups(learned) == groups(alone) == expected(copy_of), (groups(learned), stats)


def crawl_in_parts(tmp_path, base, pages, parts, settings, name):
    """``parts`` crawl processes at once, each on every ``parts``-th page (so a template's pages and every
    group's copies span the processes), in tag mode on one store; their results."""
    paths = list(pages)
    running = []
    for i in range(parts):
        cmd, env, stats_file, items_file = paths_crawl_command(
            tmp_path, base, paths[i::parts], {"NEARDUP_ACTION": "tag", **settings}, f"{name}{i}"
        )
        log = open(tmp_path / f"{name}{i}.log", "w")  # noqa: SIM115 - the crawl process writes it until it ends
        running.append(
            (
                subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=log, stderr=subprocess.STDOUT),
                stats_file,
                items_file,
                log,
            )
        )
    results = []
    for proc, stats_file, items_file, log in running:
        code = proc.wait(180)
        log.close()
        with open(log.name) as written:
            results.append(read_result(code, stats_file, items_file, written.read()))
    for result in results:
        assert result.returncode == 0 and result.stats.get("finish_reason") == "finished", result.log[-3000:]
    return results


@one_server_kind()
def test_three_processes_on_one_redis_learn_one_selector_a_template_and_the_next_crawl_starts_warm(
    tmp_path, redis_server
):
    three_processes_share_selectors(tmp_path, redis_server.url, "redis")


@pytest.mark.extended
@one_server_kind()
def test_three_processes_on_a_redis_cluster_share_their_selectors(tmp_path, shared_cluster):
    three_processes_share_selectors(tmp_path, shared_cluster.url, "cluster")


def three_processes_share_selectors(tmp_path, url, store):
    pages, copy_of = site()
    pages = shuffled(pages, 5)
    settings = {
        "NEARDUP_STORE_URL": url,
        "NEARDUP_REDIS_KEY": f"learned-{store}-{uuid.uuid4().hex[:8]}:{{%(spider)s}}",
        "CONCURRENT_REQUESTS": "4",
    }
    with ServerThread(pages_server(pages)) as running:
        first = crawl_in_parts(tmp_path, running.url, pages, 3, settings, "first")
        again = crawl_in_parts(tmp_path, running.url, pages, 3, settings, "again")
    merged = SimpleNamespace(items=[item for result in first for item in result.items])
    assert groups(merged) == expected(copy_of)
    # Each template has one selector in the store, whichever process saved it first; every process of
    # the next crawl takes the three before its first page, and none learns or needs trafilatura again.
    learned = sum(result.stats.get("neardup/learned/learned", 0) for result in first)
    assert learned >= 3, [r.neardup_stats() for r in first]
    for result in again:
        stats = result.neardup_stats()
        assert stats.get("neardup/learned/adopted", 0) == 3, stats
        assert "neardup/learned/learned" not in stats and "neardup/learned/trafilatura" not in stats, stats
        assert stats.get("neardup/learned/replayed", 0) >= 1, stats
    assert sum(r.stats.get("neardup/learned/selectors", 0) for r in again) == 9


def test_a_store_s_selectors_made_for_another_trafilatura_are_never_used(tmp_path):
    """The next crawl runs another trafilatura than the one the store's selectors reproduce: none is used,
    each template is learned again, and every verdict is still trafilatura's."""
    pages, copy_of = site()
    few_at_once = {"CONCURRENT_REQUESTS": "4", "NEARDUP_URL_RULES": "learn"}  # every copy fetched each time
    first = crawl_tagged(tmp_path, pages, few_at_once, name="first")
    assert first.neardup_stats()["neardup/learned/selectors"] == 3
    with sqlite3.connect(tmp_path / "store.sqlite3") as db:
        rows = db.execute("SELECT name, record FROM selectors").fetchall()
        assert len(rows) == 3
        for n, (name, record) in enumerate(rows):
            other = json.loads(record)
            if n == 0:  # a record of the learner's first format, which had no count of checks
                other = {k: v for k, v in other.items() if k not in ("checked", "missed")} | {"v": 1}
            else:
                other["extractor"] = other["extractor"].replace("trafilatura ", "trafilatura 0.0.1-", 1)
            db.execute("UPDATE selectors SET record = ? WHERE name = ?", (json.dumps(other), name))
        db.execute("INSERT INTO selectors (name, record) VALUES (?, ?)", ("broken.test\t1", "{not json"))
    again = crawl_tagged(tmp_path, pages, few_at_once, name="again")
    stats = again.neardup_stats()
    assert stats["neardup/learned/foreign"] == 3 and "neardup/learned/adopted" not in stats, stats
    assert stats["neardup/learned/unreadable"] == 1, stats  # the most in one read, not one a read
    assert stats["neardup/learned/learned"] >= 3 and stats.get("neardup/learned/trafilatura", 0) >= 9, stats
    assert groups(again) == groups(first) == expected(copy_of)


def test_a_template_s_pages_met_in_one_burst_are_learned_by_the_workers_themselves(tmp_path):
    """Sixty articles of one template requested at once (a section page's list): every one is in a worker
    before the first comes back, so the crawler process can offer no selector; each worker learns from its
    own share and replays the rest, with trafilatura's verdicts."""
    pages = {f"/t0/article-{n}.html": templated_page(0, n) for n in range(60)}
    for n in range(0, 60, 10):
        pages[f"/mirror/t0/article-{n}.html"] = pages[f"/t0/article-{n}.html"]
    burst = {"CONCURRENT_REQUESTS": "64", "CONCURRENT_REQUESTS_PER_DOMAIN": "64", "NEARDUP_WORKERS": "2"}
    learned = crawl_tagged(folder(tmp_path, "on"), pages, burst)
    alone = crawl_tagged(folder(tmp_path, "off"), pages, {"NEARDUP_LEARN_TEMPLATES": "False", **burst})
    stats = learned.neardup_stats()
    # Whether the crawler process learns in time to offer its own selector too depends on the machine's
    # pace; the workers' own replays and the pages no trafilatura extracted do not.
    assert stats.get("neardup/learned/by_worker", 0) >= 1, stats
    assert stats.get("neardup/learned/replayed", 0) + stats.get("neardup/learned/agreed", 0) >= 30, stats
    assert groups(learned) == groups(alone) and len(groups(alone)) == 6
