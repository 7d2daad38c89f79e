"""scrapy-neardup report: one self-contained HTML file, rendered by a real headless Chromium with no network,
showing what the store holds; a hostile URL is text, never script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from scrapy_neardup.store import SqliteStore
from scrapy_neardup.store.books import CrawlBooks

HOSTILE = 'https://evil.example/"><script>document.title="pwned"</script><img src=x onerror=alert(1)>'


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scrapy_neardup.offline.cli", *args], capture_output=True, text=True, timeout=120
    )


def story(seed: int) -> str:
    import random

    r = random.Random(seed)
    return " ".join(f"w{r.randrange(20_000)}" for _ in range(300))


def chromium() -> str | None:
    return next((path for path in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if path), None)


@pytest.fixture
def report(tmp_path):
    rows = []
    for i in range(8):
        text = story(i)
        rows.append({"url": f"https://news.example/a/{i}", "text": text})
        rows.append({"url": f"https://news.example/a/{i}?utm_source=feed", "text": text})
        if i < 3:
            rows.append({"url": f"https://mirror.example/a/{i}", "text": text})
    rows.append({"url": HOSTILE, "text": story(1)})
    src = tmp_path / "pages.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store_url = f"sqlite:///{tmp_path}/store.sqlite3"
    done = cli("dedup", str(src), "-o", str(tmp_path / "pairs.tsv"), "--store", store_url)
    assert done.returncode == 0, done.stderr
    store = SqliteStore(str(tmp_path / "store.sqlite3"))
    store.open_existing()
    store.rules.add({("news.example", "param:utm_source"): (60, 0)})
    # Two crawls that each met the same 12 soft-404 pages: the report counts a crawl, not their sum; the second
    # crawl ran in two processes at once (overlapping books: one crawl).
    hosts = {"news.example": {"avoided": 20}, "soft.example": {"soft404": 12}, '<b onmouseover="x">': {"soft404": 1}}
    store.books.add(CrawlBooks(1000.0, 1100.0, "a:1", checked=40, soft404=12, fetches_avoided=41, hosts=hosts))
    for process in ("a:2", "b:3"):
        store.books.add(CrawlBooks(2000.0, 2100.0, process, checked=20, soft404=6, fetches_avoided=20, hosts=hosts))
    store.close()
    out = tmp_path / "report.html"
    made = cli("report", store_url, "-o", str(out))
    assert made.returncode == 0, made.stderr
    return out


def test_the_report_holds_the_figures_and_escapes_what_pages_control(report):
    page = report.read_text()
    assert "<script" not in page.lower() and "http://" not in page and "https://evil" in page
    assert "default-src 'none'" in page  # nothing may run or load, even if something slipped through
    assert "&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt;" in page
    for section in ("summary", "crawls", "hosts", "groups", "patterns", "rules", "soft404", "similarities"):
        assert f"id={section}" in page
    assert "param:utm_source" in page and "another site&#x27;s page" in page
    # The last crawl's figures (two processes added up), not every crawl's sum.
    assert "<b>40</b>fetches saved by URL rules in the last crawl" in page
    assert "<td class=url>soft.example</td><td class=n>24</td></tr>" in page  # 12 in each process of that crawl
    assert page.count("<td>2 processes</td>") == 1 and page.count("<td>1 process</td>") == 1
    assert "&lt;b onmouseover=&quot;x&quot;&gt;" in page
    assert page.count("<svg") >= 3


@pytest.mark.skipif(chromium() is None, reason="no Chromium: .ci/run installs Debian's")
def test_the_report_renders_in_a_headless_browser_with_no_network(report, tmp_path):
    """Chromium loads the file with every network request refused; the DOM it builds has the report's
    sections and charts, the hostile URL as text, and its title untouched."""
    profile = tmp_path / "chromium-profile"
    proc = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--proxy-server=127.0.0.1:9",  # a closed port: nothing outside the file can load
            "--virtual-time-budget=5000",
            "--dump-dom",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert "<title>scrapy-neardup report: sqlite:///" in dom and "pwned" not in dom.split("</title>")[0]
    assert "<script" not in dom.lower() and "onerror=" not in dom.replace("onerror=alert(1)&gt;", "")
    for section in ('id="summary"', 'id="hosts"', 'id="groups"', 'id="rules"', 'id="similarities"'):
        assert section in dom
    assert dom.count("<svg") >= 3 and "<rect" in dom
    assert "news.example" in dom and "param:utm_source" in dom


def test_the_charts_keep_their_labels_on_the_chart_and_give_counts_an_axis():
    """A URL pattern's label, right-aligned at the label column's edge, starts inside the chart at 7 px a
    character (the chart's 12 px font); the similarity histogram says what its columns count."""
    import re

    from scrapy_neardup.offline.report import _bars, _histogram

    long = "news.example.com/" + "x" * 80
    svg = _bars([(long, 10.0, "10"), ("short", 3.0, "3")])
    for x, text in re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="end">([^<]*)</text>', svg):
        assert float(x) - 7 * len(text) >= 0, (x, text)
    assert "x" * 80 in svg  # whole in the bar's tooltip
    histogram = _histogram([0.5] * 7 + [0.9] * 3 + [0.95])
    ticks = re.findall(r'text-anchor="end">(\d+)</text>', histogram)
    assert ticks == ["0", "4", "7"] and ">pages</text>" in histogram
    assert all(float(x) >= 48 for x in re.findall(r'<rect x="([\d.]+)"', histogram))
