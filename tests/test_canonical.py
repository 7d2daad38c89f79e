"""rel="canonical" (RFC 6596) in a real crawl: the declared original survives in drop mode, whichever copy
comes first; a declaration the content does not bear out is ignored."""

from __future__ import annotations

import random
import subprocess

import pytest
from crawlkit import ServerThread, pages_server, paths_crawl_command, read_result

from scrapy_neardup.engine.extract import declared_canonical, link_header_canonical

pytestmark = pytest.mark.slow


def story(seed: int) -> str:
    r = random.Random(seed)
    return " ".join(f"w{r.randrange(50_000)}" for _ in range(300))


def html(text: str, head: str = "", chrome: str = "") -> str:
    return (f"<html><head><title>t</title>{head}</head><body>{chrome}<article><h1>A story</h1><p>{text}</p>"
            "</article></body></html>")


def linked(page: str, link: str) -> tuple[bytes, dict[str, str]]:
    return page.encode(), {"Link": link}


# path: page, fetched in this order, all on one host.
PAGES = {
    "/print/x": html(story(1), head='<link rel="canonical" href="/articles/x">'),
    "/articles/x": html(story(1), chrome="<nav><a href=/>Home</a></nav>"),
    "/amp/x": linked(html(story(1), chrome="<div>amp</div>"), '</articles/x>; rel="canonical"'),
    "/": html(story(2)),
    # A site that declares its home page canonical for every page: not borne out by the content.
    "/a/1": html(story(3), head='<link rel="canonical" href="/">'),
    "/a/2": html(story(4), head='<link rel="canonical" href="/">'),
}


def crawl(tmp_path, name, keys=False, **settings):
    with ServerThread(pages_server(PAGES)) as server:
        settings = {"CONCURRENT_REQUESTS": "1", "NEARDUP_STORE_URL": f"sqlite:///{tmp_path}/{name}.sqlite3",
                    **settings}
        cmd, env, stats_file, items_file = paths_crawl_command(tmp_path, server.url, list(PAGES), settings, name)
        if keys:
            cmd[cmd.index("-a"):cmd.index("-a")] = ["-a", "keys=1"]
        proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    result = read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)
    assert result.stats.get("finish_reason") == "finished", result.log[-3000:]
    return result, {i["path"] for i in result.items}


def test_the_declared_original_survives_drop_mode_whichever_copy_comes_first(tmp_path):
    result, kept = crawl(tmp_path, "canonical")
    # /print/x came first and declared /articles/x: filed under it, so the original is not its copy.
    assert {"/print/x", "/articles/x"} <= kept
    assert "/amp/x" not in kept  # declared by its Link header, and the content matches: a copy
    assert {"/", "/a/1", "/a/2"} <= kept  # "every page's canonical is the home page": not borne out
    stats = result.neardup_stats()
    assert stats["neardup/dropped"] == 1 and stats["neardup/seen"] == 1
    assert "http://127.0.0.1" in result.log and "/amp/x is a near-duplicate of" in result.log

    without, kept_without = crawl(tmp_path, "plain", NEARDUP_CANONICAL="False")
    assert "/articles/x" not in kept_without  # the original dropped as a copy of its print version
    # A key the spider gives (neardup_key, here the URL itself) wins over any declaration.
    keyed, kept_keyed = crawl(tmp_path, "keyed", keys=True)
    assert "/articles/x" not in kept_keyed and "/amp/x" not in kept_keyed


def test_canonical_declarations_are_read_from_the_head_and_the_link_header():
    assert declared_canonical('<head><link rel="canonical" href="/a#x"></head>', "http://h/p") == "http://h/a"
    assert declared_canonical("<HEAD><LINK HREF='https://o/a' REL='Canonical'></HEAD>", "http://h/") == "https://o/a"
    assert declared_canonical('<head><link rel=canonical href="javascript:alert(1)"></head>', "http://h/") is None
    assert declared_canonical('<head></head><body><link rel=canonical href=/late></body>', "http://h/") is None
    # The word elsewhere first (a meta tag, a stylesheet's URL) and in odd casing: the link that declares it wins.
    head = ('<head><meta property="og:type" content="canonical"><link rel="stylesheet" href="/canonical.css">'
            '<link title="x" rel="CaNoNiCaL" href="/real"></head>')
    assert declared_canonical(head, "http://h/") == "http://h/real"
    assert link_header_canonical(['</b>; rel=preload, </c>; rel="canonical"'], "http://h/p") == "http://h/c"
    assert link_header_canonical(['<https://o/a>; rel="next"'], "http://h/") is None
