"""rel="canonical" (RFC 6596) in real crawls: every pattern of declaration met on the web, crawled in several
orders and twice, in drop and tag mode, on SQLite and Redis. The declared original reaches the spider, once,
whichever copy comes first; a declaration the content does not bear out changes nothing; a re-crawl gives
every page the outcome it had (scrapy_neardup.engine.canonical)."""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
import threading

import pytest
from helpers import SPIDERS
from helpers.crawlkit import (
    ServerThread,
    crawl_tagged,
    gated,
    held,
    pages_server,
    paths_crawl_command,
    read_result,
    scrapy_command,
)
from helpers.pages import html, story
from helpers.redis_server import one_server_kind
from helpers.sitegen import slow_page

from scrapy_neardup.crawl.declared import DECLARED_WAIT_SECS
from scrapy_neardup.engine.canonical import declared_canonical, link_header_canonical

pytestmark = pytest.mark.slow


def linked(page: str, link: str) -> tuple[bytes, dict[str, str]]:
    return page.encode(), {"Link": link}


SPIDER_LINKS = os.path.join(SPIDERS, "links.py")


def canonical_site(port: int) -> dict[str, object]:
    """Every pattern of declaration met on the web, on one host (127.0.0.1), and one other site (localhost):
    path → page. Content groups are named by their story's seed."""
    other = f"http://localhost:{port}"
    moved = (b"", {"Location": "/d", "Content-Type": "text/html"}, 301)
    return {
        # Self-canonical.
        "/s": html(story(10), head='<link rel="canonical" href="/s">'),
        # An article and its tracking-parameter, AMP and print aliases, which declare it (head or header).
        "/a": html(story(1), head='<link rel="canonical" href="/a">', chrome="<nav><a href=/>Home</a></nav>"),
        "/a?utm_source=feed": html(story(1), head='<link rel="canonical" href="/a">'),
        "/amp/a": linked(html(story(1), chrome="<div>amp</div>"), '</a>; rel="canonical"'),
        "/print/a": html(story(1), head='<link rel="canonical" href="http://127.0.0.1:%d/a">' % port),
        # A scraped copy of /b whose template declares an unrelated article.
        "/b": html(story(2)),
        "/scraped/b": html(story(2), head='<link rel="canonical" href="/a">', chrome="<div>scraped</div>"),
        # Every page declares the home page.
        "/": html(story(3)),
        "/h1": html(story(4), head='<link rel="canonical" href="/">'),
        "/h2": html(story(5), head='<link rel="canonical" href="/">'),
        # A declared page that is not there; one that redirects to the article.
        "/c": html(story(6), head='<link rel="canonical" href="/missing">'),
        "/d-print": html(story(7), head='<link rel="canonical" href="/d-old">'),
        "/d-old": moved,
        "/d": html(story(7)),
        # A chain: e1 → e2 → e3, one text.
        "/e1": html(story(8), head='<link rel="canonical" href="/e2">'),
        "/e2": html(story(8), head='<link rel="canonical" href="/e3">'),
        "/e3": html(story(8)),
        # Syndication: a copy here of an original on another site, with a correct canonical.
        "/syn/f": html(story(9), head=f'<link rel="canonical" href="{other}/f">', chrome="<div>partner</div>"),
        "/f": html(story(9)),
        # A copy of a page of another site that the crawl never fetches.
        "/syn/g": html(story(11), head=f'<link rel="canonical" href="{other}/gone">', chrome="<div>partner</div>"),
    }


#: The pages the index links to (not /d-old, reached only through the declaration, nor /missing).
LINKED = [
    "/s",
    "/a",
    "/a?utm_source=feed",
    "/amp/a",
    "/print/a",
    "/b",
    "/scraped/b",
    "/",
    "/h1",
    "/h2",
    "/c",
    "/d-print",
    "/d",
    "/e1",
    "/e2",
    "/e3",
    "/syn/f",
    "LOCALHOST/f",
    "/syn/g",
]
#: Pages that are copies of a page they declare: the original is the one that reaches the spider.
COPIES = {"/a?utm_source=feed": "/a", "/amp/a": "/a", "/print/a": "/a", "/d-print": "/d"}


def orders() -> dict[str, list[str]]:
    originals_first = sorted(LINKED, key=lambda p: p in COPIES)
    copies_first = sorted(LINKED, key=lambda p: p not in COPIES)
    shuffled = {f"shuffled-{seed}": random.Random(seed).sample(LINKED, len(LINKED)) for seed in (1, 2)}
    return {"originals-first": originals_first, "copies-first": copies_first, **shuffled}


class Site:
    def __init__(self) -> None:
        self.pages: dict[str, object] = {}
        self.server = ServerThread(pages_server(self.pages))
        self.port = self.server.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.pages.update(canonical_site(self.port))

    def url(self, path: str) -> str:
        return (
            path.replace("LOCALHOST", f"http://localhost:{self.port}")
            if path.startswith("LOCALHOST")
            else self.base + path
        )

    def crawl(
        self,
        tmp_path,
        name: str,
        order: list[str],
        store_url: str,
        action: str = "drop",
        allowed: str = "",
        **more: str,
    ):
        links = "".join(f'<a href="{self.url(p)}">x</a>' for p in order)
        self.pages["/index"] = f"<html><body>{links}</body></html>"
        settings = {
            "ADDONS": json.dumps({"scrapy_neardup.Addon": 300}),
            "NEARDUP_ENABLED": "True",
            "NEARDUP_ACTION": action,
            "NEARDUP_STORE_URL": store_url,
            "CONCURRENT_REQUESTS": "1",
            "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
            "NEARDUP_DEBUG": "True",
            "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue",  # links order, any host
            "TELNETCONSOLE_ENABLED": "False",
            "ROBOTSTXT_OBEY": "False",
            **more,
        }
        args = ["runspider", SPIDER_LINKS, "-a", f"base={self.base}"]
        args += ["-a", f"allowed={allowed}"] if allowed else []
        cmd, env, stats_file, items_file = scrapy_command(args, tmp_path, settings, name)
        proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
        result = read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)
        assert result.stats.get("finish_reason") == "finished", result.log[-3000:]
        assert "Traceback" not in result.log, result.log[-3000:]
        return result

    def path(self, url: str) -> str:
        return (
            url[len(self.base) :]
            if url.startswith(self.base)
            else url.replace(f"http://localhost:{self.port}", "LOCALHOST")
        )


def delivered(site: Site, result) -> list[str]:
    return sorted(site.path(item["url"]) for item in result.items)


def assert_one_page_per_group(site: Site, result, order_name: str) -> None:
    got = delivered(site, result)
    assert len(got) == len(set(got)), (order_name, got)  # no page reaches the spider twice
    kept = set(got)
    # The declared original, never its copies, whichever came first.
    assert "/a" in kept and not kept & set(COPIES), (order_name, got)
    assert "/d" in kept, (order_name, got)
    # A declaration not borne out changes nothing: /h1, /h2, /c and the home page all reach the spider.
    assert {"/", "/h1", "/h2", "/c", "/s"} <= kept, (order_name, got)
    # The scraped copy and its original: one of them (nothing says which is the original).
    assert len(kept & {"/b", "/scraped/b"}) == 1, (order_name, got)
    # The end of the chain always; the syndicated original on the other site is never dropped.
    assert "/e3" in kept and "LOCALHOST/f" in kept, (order_name, got)
    # No page is a near-duplicate of itself, and every verdict names another page.
    assert "is a near-duplicate of itself" not in result.log


def assert_every_order_and_a_recrawl(tmp_path, store_url_for, only=None) -> None:
    site = Site()
    with site.server:
        for n, (order_name, order) in enumerate(orders().items()):
            if only is not None and order_name not in only:
                continue
            store_url = store_url_for(order_name, n)
            more = {}
            if store_url.startswith("redis+cluster"):  # one database: a key prefix per order
                more = {"NEARDUP_REDIS_KEY": f"neardup:{{{order_name}}}"}
            first = site.crawl(tmp_path, f"{order_name}-1", order, store_url, **more)
            assert_one_page_per_group(site, first, order_name)
            stats = first.neardup_stats()
            assert "neardup/seen" not in stats, (order_name, stats)  # nothing is seen before in an empty store
            # The syndicated copies declare pages of another site, not fetched first: each counted when the
            # declared page was not filed before it (/f came later, /gone never comes), never again once the
            # copy itself is filed.
            syndicated_first = order.index("/syn/f") < order.index("LOCALHOST/f")
            assert stats.get("neardup/canonical/other_site", 0) == 1 + syndicated_first, (order_name, stats)
            said = [line for line in first.log.splitlines() if "is on another site than it" in line]
            assert len(said) == 1 + syndicated_first and "INFO" in said[0], (order_name, said)  # then DEBUG
            # The same site again, the same store, in another order: one page per group again, each group
            # through the page of the first crawl or, when a better copy of it arrived after its first page
            # (bestcopy: /b after /scraped/b), through that copy; the third crawl exactly as the second.
            second = site.crawl(tmp_path, f"{order_name}-2", list(reversed(order)), store_url, **more)
            assert_one_page_per_group(site, second, order_name)
            moved = set(delivered(site, first)) ^ set(delivered(site, second))
            assert moved <= {"/b", "/scraped/b"}, (order_name, moved)
            assert ("/b" in moved) == (first.neardup_stats().get("neardup/repointed", 0) == 1), order_name
            assert "neardup/rechecked/changed" not in second.neardup_stats()
            assert "neardup/canonical/other_site" not in second.neardup_stats(), order_name
            assert second.stats.get("neardup/unique", 0) == 0, second.neardup_stats()
            if moved:  # a group moved to its better copy: from now on it stays there
                third = site.crawl(tmp_path, f"{order_name}-3", order, store_url, **more)
                assert delivered(site, third) == delivered(site, second), order_name


def test_one_page_per_group_reaches_the_spider_in_any_order_and_a_recrawl_keeps_every_verdict(tmp_path):
    assert_every_order_and_a_recrawl(tmp_path, lambda name, n: f"sqlite:///{tmp_path}/{name}.sqlite3")


@pytest.mark.extended
@one_server_kind()
def test_the_same_on_redis(tmp_path, redis_server):
    """Copies first and shuffled on each server kind (every order runs on SQLite above)."""
    assert_every_order_and_a_recrawl(
        tmp_path, lambda name, n: redis_server.url.replace("/0", f"/{n}"), only=("copies-first", "shuffled-2")
    )


@pytest.mark.extended
@one_server_kind()
def test_the_same_on_a_redis_cluster(tmp_path, shared_cluster):
    assert_every_order_and_a_recrawl(tmp_path, lambda name, n: shared_cluster.url, only=("copies-first", "shuffled-1"))


def test_tag_mode_gives_the_same_groups_in_any_order_and_again(tmp_path):
    site = Site()
    groups = []
    with site.server:
        for order_name, order in list(orders().items())[:2]:
            store_url = f"sqlite:///{tmp_path}/tag-{order_name}.sqlite3"
            result = site.crawl(tmp_path, f"tag-{order_name}", order, store_url, action="tag")
            assert result.stats["neardup/tagged"] >= 4 and "neardup/dropped" not in result.stats
            # The verdicts, as the store keeps them: every page checked is filed under its own URL.
            code, out, err = run_cli(
                "store",
                store_url,
                "show",
                *[site.url(p) for p in LINKED if p != "/scraped/b" and p != "/b" and not p.startswith("/e")],
            )
            assert code == 0, err
            records = {site.path(r["url"]): r for r in map(json.loads, out.splitlines())}
            assert all(r["status"] != "unknown" for r in records.values()), records  # every page is filed
            assert all(r["canonical"] != r["url"] for r in records.values()), records  # never its own copy
            group = {p: site.path(r["canonical"]) if r["canonical"] else p for p, r in records.items()}
            assert all(group[c] == "/a" for c in ("/a?utm_source=feed", "/amp/a", "/print/a")), group
            assert group["/d-print"] == "/d" and group["/a"] == "/a", group
            groups.append(group)
            # Again, in reverse order, on the same store: every page keeps its group.
            again = site.crawl(tmp_path, f"tag-{order_name}-again", list(reversed(order)), store_url, action="tag")
            assert again.stats.get("neardup/seen") == again.stats["neardup/checked"], again.neardup_stats()
            assert again.stats["neardup/tagged"] == result.stats["neardup/tagged"]
    assert groups[0] == groups[1]


def run_cli(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", *args], capture_output=True, text=True, timeout=60
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_canonical_declarations_are_read_from_the_head_and_the_link_header():
    assert declared_canonical('<head><link rel="canonical" href="/a#x"></head>', "http://h/p") == "http://h/a"
    assert declared_canonical("<HEAD><LINK HREF='https://o/a' REL='Canonical'></HEAD>", "http://h/") == "https://o/a"
    assert declared_canonical('<head><link rel=canonical href="javascript:alert(1)"></head>', "http://h/") is None
    assert declared_canonical("<head></head><body><link rel=canonical href=/late></body>", "http://h/") is None
    # The word elsewhere first (a meta tag, a stylesheet's URL) and in odd casing: the link that declares it wins.
    head = (
        '<head><meta property="og:type" content="canonical"><link rel="stylesheet" href="/canonical.css">'
        '<link title="x" rel="CaNoNiCaL" href="/real"></head>'
    )
    assert declared_canonical(head, "http://h/") == "http://h/real"
    # Past the head's first 64 KB (inline styles and scripts before it): still the head, still read.
    big = f'<html><head><meta name="x" content="{"y" * 70_000}"><link rel="canonical" href="/far"></head>'
    assert declared_canonical(big + "<body>b</body>", "http://h/") == "http://h/far"
    # A head whose end tag is left out ends where the body starts.
    assert declared_canonical("<head><title>t</title><body><link rel=canonical href=/late>", "http://h/") is None
    assert link_header_canonical(['</b>; rel=preload, </c>; rel="canonical"'], "http://h/p") == "http://h/c"
    assert link_header_canonical(['<https://o/a>; rel="next"'], "http://h/") is None


@pytest.mark.parametrize("order_name", ["copies-first", "shuffled-1"])
def test_the_crawl_and_dedup_decide_the_same_pages_in_the_same_order_alike(tmp_path, order_name):
    """The same pages in the same order, declarations included: the same pairs from a crawl and from
    ``scrapy-neardup dedup`` (the CLI takes a declared page from later in its input, as the crawl fetches it).
    A redirect is what a dump cannot hold: /d-print, which declares a URL that redirects, is left out."""
    site = Site()
    order = [p for p in orders()[order_name] if p not in ("/d-print", "/d")]
    store_url = f"sqlite:///{tmp_path}/crawl.sqlite3"
    with site.server:
        site.crawl(tmp_path, "crawl", order, store_url, action="tag")
        jsonl = tmp_path / "pages.jsonl"
        with jsonl.open("w") as f:
            for path in order:
                page = site.pages[path.replace("LOCALHOST", "")]
                body, headers = (page, {}) if isinstance(page, str) else (page[0].decode(), page[1])
                record = {"url": site.url(path), "html": body}
                if "Link" in headers:  # what a WARC record's Link header carries: here, the JSONL field
                    record["canonical"] = headers["Link"].split(">")[0].lstrip("<")
                f.write(json.dumps(record) + "\n")
    code, _, err = run_cli("dedup", str(jsonl), "-o", str(tmp_path / "pairs.tsv"))
    assert code == 0, err
    cli_pairs = {
        tuple(line.split("\t")[:2])
        for line in (tmp_path / "pairs.tsv").read_text().splitlines()
        if line and not line.startswith("#")
    }
    code, out, err = run_cli("store", store_url, "show", *[site.url(p) for p in order])
    assert code == 0, err
    crawl_pairs = {(r["url"], r["canonical"]) for r in map(json.loads, out.splitlines()) if r["canonical"]}
    assert crawl_pairs == cli_pairs
    assert (site.url("/amp/a"), site.url("/a")) in cli_pairs  # the declared original, though it came later


def test_the_same_site_is_the_registrable_domain():
    from scrapy_neardup.engine.canonical import same_site

    assert same_site("http://www.example.com/a", "https://example.com/a?utm_source=x")  # scheme, www.
    assert same_site("https://amp.news.example.co.uk/a", "https://www.example.co.uk/a")  # a public suffix of two
    assert not same_site("https://a.github.io/x", "https://b.github.io/x")  # a private suffix: two sites
    assert not same_site("https://example.com/a", "https://example.org/a")
    assert same_site("http://127.0.0.1:8000/a", "http://127.0.0.1:8000/b")
    assert not same_site("http://127.0.0.1:8000/a", "http://localhost:8000/a")
    # Intranets: a host without a public suffix is of the site of its last two labels; a private address,
    # of the site of its network; a public address is its own site.
    assert same_site("http://wiki.corp.internal/a", "http://mirror.corp.internal/a")
    assert not same_site("http://wiki.corp.internal/a", "http://wiki.other.internal/a")
    assert same_site("http://10.1.2.3/a", "http://10.1.9.9/a") and same_site("http://127.0.0.1/", "http://127.0.0.2/")
    assert not same_site("http://10.1.2.3/a", "http://10.2.2.3/a")
    assert not same_site("http://8.8.8.8/a", "http://8.8.4.4/a")
    assert not same_site("http://intranet/a", "http://wiki/a")


def test_a_mirror_on_another_address_of_the_intranet_met_first_is_a_near_duplicate(tmp_path):
    """A mirror on 127.0.0.2 of articles on 127.0.0.1 that declare themselves, every mirror page met before
    its article: the declared articles are fetched first (one intranet, one site), so each article reaches
    the spider once, through its own URL."""
    served: dict[str, str] = {}  # filled once the origin's port is known
    with ServerThread(pages_server(served)) as origin, ServerThread(pages_server(served, host="127.0.0.2")) as mirror:
        base = origin.url.rstrip("/")
        for i in range(12):
            served[f"/a/{i}"] = html(story(900 + i), head=f'<link rel="canonical" href="{base}/a/{i}">')
        urls = [mirror.url.rstrip("/") + p for p in served] + [base + p for p in served]
        cmd, env, stats_file, items_file = paths_crawl_command(
            tmp_path, "", urls, {"CONCURRENT_REQUESTS": "1", "LOG_LEVEL": "INFO"}, spider_args=["filtered=1"]
        )
        proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    result = read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)
    assert result.returncode == 0, result.log[-3000:]
    assert sorted(i["url"] for i in result.items) == sorted(base + p for p in served), result.neardup_stats()
    assert result.stats["neardup/canonical/fetched_first"] == 12


def test_a_declared_page_forbidden_by_robots_txt_or_off_the_allowed_domains_is_not_fetched(tmp_path):
    """The declared page is fetched through the downloader middlewares: robots.txt and allowed_domains
    apply to it as to any request, and the copy is then checked on its own."""
    site = Site()
    site.pages["/robots.txt"] = (b"User-agent: *\nDisallow: /a$\n", {"Content-Type": "text/plain"})
    with site.server:
        robots = site.crawl(
            tmp_path, "robots", ["/amp/a", "/print/a"], f"sqlite:///{tmp_path}/r.sqlite3", ROBOTSTXT_OBEY="True"
        )
        # The spider allows 127.0.0.1 only; /syn/f declares the original on localhost (fetch "all").
        offsite = site.crawl(
            tmp_path,
            "offsite",
            ["/syn/f"],
            f"sqlite:///{tmp_path}/o.sqlite3",
            NEARDUP_CANONICAL_FETCH="all",
            allowed="127.0.0.1",
        )
    stats = robots.neardup_stats()
    # The second copy does not ask again: the refusal is remembered for the crawl.
    assert stats["neardup/canonical/fetch_failed"] == 1 and stats["neardup/canonical/failed_before"] == 1, stats
    assert "neardup/canonical/fetched" not in stats, stats
    # Checked on their own: the first is filed as a canonical page, the second is its near-duplicate.
    assert stats["neardup/unique"] == 1 and stats["neardup/duplicate"] == 1
    assert "could not be fetched" in robots.log and "Forbidden by robots.txt" in robots.log
    stats = offsite.neardup_stats()
    assert stats["neardup/canonical/fetch_failed"] == 1 and stats["neardup/unique"] == 1, stats


@pytest.mark.parametrize("declared", ["/gone", "/original"], ids=["missing", "there"])
def test_copies_declaring_a_page_another_copy_fetches_first_are_released_by_its_decision(tmp_path, declared):
    """Twelve pages of one template declare one page (missing, or an original not linked from anywhere):
    the first copy fetches it first; the others, finding it in flight, wait for that copy's decision and
    go on right after it, never for the whole wait (``neardup/canonical/await_timeout``). The declared page
    is answered 2 s after it is asked for, so that the other copies' checks come while it is in flight on a
    loaded machine too (answered at once, a copy checked after the first copy's decision finds the page
    failed or kept instead, and nothing waits)."""
    head = f'<link rel="canonical" href="{declared}">'
    pages: dict[str, object] = {f"/t/{i}": html(story(400 + i), head=head) for i in range(12)}
    crawled = list(pages)
    pages["/original"] = html(story(400))
    pages[declared] = held(pages.get(declared), 2.0)
    result = crawl_tagged(tmp_path, pages, {"CONCURRENT_REQUESTS": "16"}, timeout=120, paths=crawled)
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    stats = result.neardup_stats()
    assert stats.get("neardup/canonical/awaited", 0) >= 1, stats
    assert "neardup/canonical/await_timeout" not in stats, stats
    assert result.stats["elapsed_time_seconds"] < DECLARED_WAIT_SECS  # (the old code waited it out)
    assert {item["path"] for item in result.items} >= set(crawled)


def test_a_declared_page_that_cannot_be_had_or_is_not_matched_is_downloaded_once_for_all_its_copies(tmp_path):
    """A site whose template declares one page on every page: a missing one (``/gone``), or an unrelated one
    that the crawl never requests itself (``/other``). One request at a time, so each copy comes after the
    one before was decided and never finds the declared page in flight: the failed fetch is remembered, and
    the unrelated page's response, kept for its own request, is used again. Each is downloaded once (on
    the code before, once a copy)."""
    hits: collections.Counter[str] = collections.Counter()

    def counted(path: str, page: object) -> object:
        def answer() -> object:
            hits[path] += 1
            return page

        return answer

    pages: dict[str, object] = {
        f"/t/{i}": html(story(500 + i), head='<link rel="canonical" href="/gone">') for i in range(6)
    }
    pages.update({f"/u/{i}": html(story(520 + i), head='<link rel="canonical" href="/other">') for i in range(6)})
    crawled = list(pages)
    pages["/gone"] = counted("/gone", None)
    pages["/other"] = counted("/other", html(story(540)))
    result = crawl_tagged(tmp_path, pages, {"CONCURRENT_REQUESTS": "1"}, timeout=120, paths=crawled)
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    assert hits == {"/gone": 1, "/other": 1}, hits
    stats = result.neardup_stats()
    assert stats["neardup/canonical/fetch_failed"] == 1 and stats["neardup/canonical/failed_before"] == 5, stats
    assert stats["neardup/canonical/fetched"] == 1 and stats["neardup/canonical/reused"] == 5, stats
    # Every copy checked on its own: twelve different articles, none tagged.
    assert sorted(item["path"] for item in result.items) == sorted(crawled)
    assert not any(item.get("near_duplicate_of") for item in result.items), result.items


def test_a_declared_pages_own_request_during_its_copys_check_takes_the_response_fetched_for_the_copy(tmp_path):
    """The copy ``/amp/x`` comes first and has its declared page ``/x`` fetched; the spider's own request for
    ``/x`` leaves the queue while the copy is still being checked (``/x`` is long to extract, and the request
    ahead of it, ``/gate``, is answered a moment after ``/x`` was served). It takes the response fetched for
    the copy: ``/x`` is downloaded once (on the code before, it was kept only once the copy's check was
    done, and ``/x`` was downloaded again). ``/x`` takes a worker about 0.6 s of CPU on a quiet machine, and
    ``/gate`` is answered 0.1 s of wall time after ``/x`` was served: the spider's request leaves the queue
    before the copy's check ends, on a quiet machine as on a loaded one, which slows the extraction more than
    the timer. Were the check to end first, the copy's verdict would follow ``/x`` with a request of its own,
    which would take the kept response, and the spider's request (not filtered) would download ``/x`` again."""
    hits: collections.Counter[str] = collections.Counter()
    gate = threading.Event()
    article = slow_page(6000)
    head = '<link rel="canonical" href="/x">'

    def declared() -> str:
        if not hits["/x"]:
            threading.Timer(0.1, gate.set).start()
        hits["/x"] += 1
        return article.replace("<html>", f"<html><head>{head}</head>")

    pages = {
        "/amp/x": article.replace("<html>", f"<html><head>{head}</head>").replace("<body>", "<body><div>amp</div>"),
        "/gate": gated(html(story(30)), gate),
        "/x": declared,
    }
    result = crawl_tagged(tmp_path, pages, {"CONCURRENT_REQUESTS": "2"}, timeout=120)
    gate.set()
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    assert result.neardup_stats()["neardup/canonical/fetched"] == 1, result.neardup_stats()
    assert hits["/x"] == 1, hits
    assert sorted(item["path"] for item in result.items) == ["/amp/x", "/gate", "/x"]


def test_a_declaration_that_leads_back_to_the_copy_itself_keeps_nothing(tmp_path):
    """``/r/a`` declares ``/r/canon``, which redirects back to ``/r/a``: the copy is checked on its own, and
    the response the redirect led to is not kept as a declared page's (it is the copy's own page). So its
    near-duplicate ``/r/b``, met next, does not request ``/r/a`` again in its place (``followed``): the
    group's page was fetched in this crawl."""
    text = story(40)
    pages = {
        "/r/a": html(text, head='<link rel="canonical" href="/r/canon">'),
        "/r/canon": (b"", {"Location": "/r/a", "Content-Type": "text/html"}, 301),
        "/r/b": html(text, chrome="<div>mirror</div>"),
    }
    result = crawl_tagged(tmp_path, pages, {"CONCURRENT_REQUESTS": "1"}, timeout=120, paths=["/r/a", "/r/b"])
    assert result.returncode == 0 and "Traceback" not in result.log, result.log[-3000:]
    stats = result.neardup_stats()
    assert stats["neardup/unique"] == 1 and stats["neardup/duplicate"] == 1, stats
    assert "neardup/canonical/followed" not in stats, stats
    assert sorted(item["path"] for item in result.items) == ["/r/a", "/r/b"]
