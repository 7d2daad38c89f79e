"""``scrapy-neardup report``: one self-contained HTML page of what a crawl's store says about its duplicates.

Per host, the share of fetches that were near-duplicates and the fetches the URL rules saved; the largest
groups with their URLs; the URL patterns behind the duplicates (the rewrites of
:mod:`scrapy_neardup.engine.urlrules` that explain a copy's URL); the learned rules; the soft-404 hosts; the
similarities of the near-duplicates. Plots are inline SVG drawn here, so the file opens offline, with no
script at all.

Everything a crawled page controls (URLs, hosts) is escaped, and the page forbids every script and every
request (a Content-Security-Policy of ``default-src 'none'``): a hostile URL is shown as text, never run.
"""

from __future__ import annotations

import html
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..assembly import build_rule_book
from ..engine.urlrules import explain, host_of
from ..settings import Config
from ..store.base import DocRecord
from ..store.books import CrawlBooks, added_up, crawls_of

#: Groups listed, hosts plotted, rows of the pattern table.
LARGEST_GROUPS = 25
PLOTTED_HOSTS = 25
PATTERN_ROWS = 40


@dataclass
class HostFigures:
    pages: int = 0
    duplicates: int = 0
    skipped: int = 0
    soft404: int = 0

    @property
    def duplicate_share(self) -> float:
        fetched = self.pages + self.soft404
        return (self.duplicates + self.soft404) / fetched if fetched else 0.0


@dataclass
class ReportData:
    """What the report shows, read from a store (:func:`collect`). ``crawls``: each crawl's books, its
    processes added up, oldest first; the host figures of soft-404 pages and fetches saved are the last
    crawl's."""

    location: str
    documents: int = 0
    canonical: int = 0
    duplicates: int = 0
    hosts: dict[str, HostFigures] = field(default_factory=dict)
    groups: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    patterns: Counter[tuple[str, str]] = field(default_factory=Counter)
    similarities: list[float] = field(default_factory=list)
    rules: list[tuple[str, str, int, int, float, bool, str]] = field(default_factory=list)
    crawls: list[CrawlBooks] = field(default_factory=list)

    @property
    def last_crawl(self) -> CrawlBooks | None:
        return self.crawls[-1] if self.crawls else None


def roots(records: Iterable[DocRecord]) -> tuple[list[DocRecord], dict[str, str]]:
    """The records, and each near-duplicate's group page: its canonical, followed through the canonicals
    whose groups were re-pointed to a better copy (:attr:`DocRecord.chained`)."""
    records = list(records)
    canonical_of = {r.key: r.canonical for r in records if r.canonical is not None}
    out: dict[str, str] = {}
    for key, canonical in canonical_of.items():
        seen = {key}
        while canonical in canonical_of and canonical not in seen:
            seen.add(canonical)
            canonical = canonical_of[canonical]
        out[key] = canonical
    return records, out


def collect(
    location: str,
    records: Iterable[DocRecord],
    rule_counts: Mapping[tuple[str, str], tuple[int, int]],
    books: Iterable[CrawlBooks],
    config: Config,
) -> ReportData:
    """The report's figures from a store's records (:meth:`Store.iter_records`), rule counts and books, the
    rules judged by ``config``'s thresholds."""
    data = ReportData(location)
    hosts: defaultdict[str, HostFigures] = defaultdict(HostFigures)
    groups: defaultdict[str, list[tuple[str, float]]] = defaultdict(list)
    records, group_of = roots(records)
    for record in records:
        key, similarity = record.key, record.similarity
        data.documents += 1
        figures = hosts[host_of(key) or "(no host)"]
        figures.pages += 1
        if record.canonical is None:
            data.canonical += 1
            continue
        canonical = group_of[key]
        data.duplicates += 1
        figures.duplicates += 1
        groups[canonical].append((key, similarity))
        data.similarities.append(similarity)
        rules = explain(key, canonical)
        if rules:
            data.patterns[(host_of(key), " + ".join(r.name for r in rules))] += 1
        elif urlsplit(key).netloc.lower() != urlsplit(canonical).netloc.lower():
            data.patterns[(host_of(key), "another site's page")] += 1
        else:
            data.patterns[(host_of(key), "another path of the site")] += 1
    data.crawls = [added_up(run) for run in crawls_of(books)]
    last = data.last_crawl
    if last is not None:
        for host, counts in last.hosts.items():
            hosts[host].soft404 += counts.get("soft404", 0)
            hosts[host].skipped += counts.get("avoided", 0)
    book = build_rule_book(config)
    book.merge(rule_counts)
    for host, rule, count, used in book.listing():
        why = "" if used else book.why_unused(host, rule)
        data.rules.append((host, rule.name, count.successes, count.failures, count.confidence, used, why))
    data.hosts = dict(hosts)
    data.groups = dict(groups)
    return data


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


#: The characters of a bar's label shown (a longer one ends in an ellipsis; its bar's tooltip holds it whole).
_LABEL_CHARS = 46


def _bars(rows: list[tuple[str, float, str]], width: int = 640, unit: str = "") -> str:
    """A horizontal bar chart as inline SVG: ``(label, value, note)`` a bar, values scaled to the largest."""
    if not rows:
        return "<p class=none>Nothing to plot.</p>"
    top = max(value for _, value, _ in rows) or 1.0
    # The label column is as wide as the longest label shown (7 px a character at the chart's 12 px font),
    # so that no label runs off the chart's left edge.
    longest = max(min(len(label), _LABEL_CHARS) for label, _, _ in rows)
    label_w, row_h = 7 * longest + 16, 18
    bar_w = width - label_w - 90
    parts = [
        f'<svg class=chart role=img width="{width}" height="{row_h * len(rows) + 6}" '
        f'viewBox="0 0 {width} {row_h * len(rows) + 6}">'
    ]
    for i, (label, value, note) in enumerate(rows):
        y = i * row_h + 3
        length = max(1.0, bar_w * value / top)
        shown = label if len(label) <= _LABEL_CHARS else label[: _LABEL_CHARS - 1] + "…"
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end">{_e(shown)}</text>'
            f'<rect x="{label_w}" y="{y}" width="{length:.1f}" height="{row_h - 4}"><title>{_e(label)}: '
            f"{_e(note)}</title></rect>"
            f'<text x="{label_w + length + 4:.1f}" y="{y + 13}">{_e(note)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _histogram(values: list[float], low: float = 0.0, bins: int = 20) -> str:
    """The similarities of the near-duplicates as inline SVG columns, ``bins`` from ``low`` to 1."""
    if not values:
        return "<p class=none>No near-duplicates.</p>"
    step = (1.0 - low) / bins
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, max(0, int((value - low) / step)))] += 1
    top = max(counts) or 1
    axis, top_pad = 48, 8  # the count axis on the left, room above the tallest column for its label
    width, height, column = 640 + axis, 180, 640 // bins
    parts = [
        f'<svg class=chart role=img width="{width}" height="{height + top_pad + 24}" '
        f'viewBox="0 0 {width} {height + top_pad + 24}">',
        f'<line x1="{axis - 2}" y1="{top_pad}" x2="{axis - 2}" y2="{height + top_pad}" stroke="#888"/>',
    ]
    for tick in sorted({0, (top + 1) // 2, top}):
        y = top_pad + height - height * tick / top
        parts.append(
            f'<line x1="{axis - 6}" y1="{y:.1f}" x2="{axis - 2}" y2="{y:.1f}" stroke="#888"/>'
            f'<text x="{axis - 8}" y="{y + 4:.1f}" text-anchor="end">{tick}</text>'
        )
    parts.append(
        f'<text x="10" y="{top_pad + height / 2:.1f}" transform="rotate(-90 10 {top_pad + height / 2:.1f})" '
        'text-anchor="middle">pages</text>'
    )
    for i, count in enumerate(counts):
        h = height * count / top
        lo = low + i * step
        parts.append(
            f'<rect x="{axis + i * column + 1}" y="{top_pad + height - h:.1f}" width="{column - 2}" height="{h:.1f}">'
            f"<title>{lo:.2f}–{lo + step:.2f}: {count}</title></rect>"
        )
        if i % 4 == 0:
            parts.append(f'<text x="{axis + i * column}" y="{top_pad + height + 16}">{lo:.2f}</text>')
    parts.append(f'<text x="{axis + 640 - 24}" y="{top_pad + height + 16}">1.00</text></svg>')
    return "".join(parts)


_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .6em;border-bottom:1px solid #eee;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}.url{font-family:monospace;word-break:break-all}
.chart rect{fill:#4a7ab5}.chart text{font-size:12px;fill:#333}.none{color:#777}
.kpi{display:inline-block;margin:0 2em 1em 0}.kpi b{display:block;font-size:1.8em}
details{margin:.4em 0}summary{cursor:pointer}
"""


def render(data: ReportData, threshold_note: str = "") -> str:
    """The report as one HTML document, with no script and no outside resource."""
    hosts = sorted(data.hosts.items(), key=lambda kv: (-(kv[1].duplicates + kv[1].soft404), kv[0]))
    last = data.last_crawl
    saved = last.fetches_avoided if last is not None else 0
    soft = [(h, f) for h, f in hosts if f.soft404]
    out = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        "<meta name=viewport content='width=device-width,initial-scale=1'>",
        f"<title>scrapy-neardup report: {_e(data.location)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>Near-duplicates in {_e(data.location)}</h1>",
        f"<p>Made {_e(time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()))} by scrapy-neardup report. "
        f"{_e(threshold_note)}</p>",
        "<section id=summary class=kpis>",
        f"<span class=kpi><b>{data.documents:,}</b>pages filed</span>",
        f"<span class=kpi><b>{data.duplicates:,}</b>near-duplicates ({_pct(data.duplicates, data.documents)})</span>",
        f"<span class=kpi><b>{len(data.groups):,}</b>groups</span>",
        f"<span class=kpi><b>{saved:,}</b>fetches saved by URL rules in the last crawl</span>",
        f"<span class=kpi><b>{len(soft):,}</b>soft-404 hosts in the last crawl</span></section>",
        "<h2 id=crawls>Crawls</h2>",
        _crawls_table(data.crawls),
        "<h2 id=hosts>Hosts</h2>",
        "<p>The share of a host's fetches that were near-duplicates (soft-404 pages included), for the hosts "
        "with the most of them.</p>",
        _bars(
            [
                (host, f.duplicate_share, f"{f.duplicate_share:.0%} of {f.pages + f.soft404:,}")
                for host, f in hosts[:PLOTTED_HOSTS]
                if f.duplicates + f.soft404
            ]
        ),
        "<table><thead><tr><th>host</th><th class=n>pages filed</th><th class=n>near-duplicates</th>"
        "<th class=n>share</th><th class=n>soft-404 pages (last crawl)</th><th class=n>fetches saved (last crawl)</th>"
        "</tr></thead><tbody>",
    ]
    for host, f in hosts:
        out.append(
            f"<tr><td class=url>{_e(host)}</td><td class=n>{f.pages:,}</td><td class=n>{f.duplicates:,}</td>"
            f"<td class=n>{f.duplicate_share:.1%}</td><td class=n>{f.soft404:,}</td><td class=n>{f.skipped:,}</td></tr>"
        )
    out.append("</tbody></table>")
    out += ["<h2 id=groups>Largest groups</h2>"]
    largest = sorted(data.groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:LARGEST_GROUPS]
    if not largest:
        out.append("<p class=none>No group.</p>")
    for canonical, members in largest:
        out.append(
            f"<details><summary><span class=url>{_e(canonical)}</span> and {len(members):,} "
            f"near-duplicate{'s' if len(members) != 1 else ''}</summary><table><tbody>"
        )
        for key, similarity in sorted(members, key=lambda m: (-m[1], m[0])):
            out.append(f"<tr><td class=url>{_e(key)}</td><td class=n>{similarity:.3f}</td></tr>")
        out.append("</tbody></table></details>")
    out += [
        "<h2 id=patterns>URL patterns behind the duplicates</h2>",
        "<p>How each near-duplicate's URL differs from its canonical page's: the rewrites that turn one into the "
        "other, or another path (a mirror, a copy) or another site (a syndicated or scraped copy).</p>",
        _bars([(f"{host} {name}", n, f"{n:,}") for (host, name), n in data.patterns.most_common(PLOTTED_HOSTS)]),
        "<table><thead><tr><th>host</th><th>pattern</th><th class=n>near-duplicates</th></tr></thead><tbody>",
    ]
    for (host, name), n in data.patterns.most_common(PATTERN_ROWS):
        out.append(f"<tr><td class=url>{_e(host)}</td><td class=url>{_e(name)}</td><td class=n>{n:,}</td></tr>")
    out += [
        "</tbody></table>",
        "<h2 id=rules>Learned URL rules</h2>",
    ]
    if data.rules:
        out.append(
            "<table><thead><tr><th>host</th><th>rule</th><th class=n>successes</th><th class=n>failures</th>"
            "<th class=n>confidence</th><th>used</th><th>why not</th></tr></thead><tbody>"
        )
        for host, name, successes, failures, confidence, used, why in data.rules:
            out.append(
                f"<tr><td class=url>{_e(host)}</td><td class=url>{_e(name)}</td><td class=n>{successes:,}</td>"
                f"<td class=n>{failures:,}</td><td class=n>{confidence:.3f}</td><td>{'yes' if used else 'no'}</td>"
                f"<td>{_e(why)}</td></tr>"
            )
        out.append("</tbody></table>")
    else:
        out.append("<p class=none>No URL rule was learned (NEARDUP_URL_RULES).</p>")
    out.append("<h2 id=soft404>Soft-404 hosts in the last crawl</h2>")
    if soft:
        out.append("<table><thead><tr><th>host</th><th class=n>soft-404 pages</th></tr></thead><tbody>")
        out += [f"<tr><td class=url>{_e(h)}</td><td class=n>{f.soft404:,}</td></tr>" for h, f in soft]
        out.append("</tbody></table>")
    else:
        out.append("<p class=none>No host answered a URL that cannot exist with a page (NEARDUP_SOFT404).</p>")
    out += [
        "<h2 id=similarities>Similarity of the near-duplicates</h2>",
        _histogram(data.similarities),
        "</body></html>",
    ]
    return "\n".join(out)


#: Crawls listed in the report's table, the newest.
LISTED_CRAWLS = 20


def _crawls_table(crawls: list[CrawlBooks]) -> str:
    """The books of the newest crawls, newest first."""
    if not crawls:
        return "<p class=none>No crawl left its books in this store (a crawl writes them when it closes).</p>"
    rows = [
        "<p>What each crawl did (its processes added up): pages checked and dropped, soft-404 pages, responses "
        "fetched, fetches the URL rules avoided (their bytes estimated by their host's mean response), and the "
        "CPU the plugin spent.</p>",
        "<table><thead><tr><th>started (UTC)</th><th>processes</th><th class=n>checked</th><th class=n>dropped</th>"
        "<th class=n>soft-404</th><th class=n>fetched</th><th class=n>MB</th><th class=n>fetches avoided</th>"
        "<th class=n>MB avoided</th><th class=n>plugin CPU s</th></tr></thead><tbody>",
    ]
    for books in reversed(crawls[-LISTED_CRAWLS:]):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(books.started))
        rows.append(
            f"<tr><td>{_e(when)}</td><td>{_e(books.process)}</td><td class=n>{books.checked:,}</td>"
            f"<td class=n>{books.dropped:,}</td><td class=n>{books.soft404:,}</td><td class=n>{books.fetches:,}</td>"
            f"<td class=n>{books.fetched_bytes / 1e6:,.1f}</td><td class=n>{books.fetches_avoided:,}</td>"
            f"<td class=n>{books.bytes_avoided / 1e6:,.1f}</td><td class=n>{books.cpu_seconds:,.1f}</td></tr>"
        )
    rows.append("</tbody></table>")
    return "".join(rows)


def _pct(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "—"
