"""A local demo news site with the near-duplicates a crawler meets in the wild, served on 127.0.0.1.

    python demo_site.py --port 8000          # serve until Ctrl-C
    python demo_site.py --print-groups       # the near-duplicate groups the site contains (JSON)
    python demo_site.py --labelled FOLDER    # the site as a labelled set for scrapy-neardup evaluate

Eight articles on the "Riverside Gazette" template, and for the first five of them: a mirror (the same
page under /mirror/), a print version (bare HTML), a syndicated copy inside the "Valley Post" template,
a noisy copy (other date, view counter, ad block, related links, tracking query string) and a lightly
edited revision (a few words changed, an "Update:" paragraph). A teaser page (the template with the lead
paragraph of an article, one of its eight) is *not* a near-duplicate. There are also responses a crawl must survive: an
empty page, a page with only JavaScript, a JSON feed, a PNG, a PDF served as text/html.

The text is generated from a fixed seed, so every run serves the same site.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import random
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOPICS = {
    "bridge": (
        "The old river bridge",
        ["engineers", "the council", "residents", "the mayor", "inspectors"],
        ["steel beams", "the repair budget", "traffic plans", "the load test", "a temporary ferry"],
    ),
    "library": (
        "The central library",
        ["librarians", "volunteers", "the trustees", "readers", "a local author"],
        ["the reading room", "rare manuscripts", "opening hours", "the digital archive", "a children's corner"],
    ),
    "harvest": (
        "This year's apple harvest",
        ["farmers", "pickers", "the cooperative", "buyers", "agronomists"],
        ["late frost", "orchard yields", "cider prices", "new varieties", "storage halls"],
    ),
    "marathon": (
        "The city marathon",
        ["runners", "organisers", "the police", "medics", "sponsors"],
        ["the new route", "water stations", "road closures", "the finish line", "charity pledges"],
    ),
    "observatory": (
        "The hilltop observatory",
        ["astronomers", "students", "the director", "visitors", "technicians"],
        ["the new telescope", "light pollution", "a comet sighting", "night tours", "the dome motor"],
    ),
    "ferry": (
        "The island ferry service",
        ["captains", "commuters", "the operator", "islanders", "unions"],
        ["winter timetables", "ticket fares", "a new vessel", "harbour works", "storm cancellations"],
    ),
    "museum": (
        "The maritime museum",
        ["curators", "divers", "the board", "schoolchildren", "historians"],
        ["a shipwreck find", "the restored sails", "admission fees", "a loan exhibition", "the old lighthouse"],
    ),
    "market": (
        "The Saturday farmers' market",
        ["stallholders", "shoppers", "the market manager", "bakers", "cheesemakers"],
        ["parking rules", "organic labels", "the covered hall", "seasonal produce", "card payments"],
    ),
}
VERBS = [
    "discussed",
    "questioned",
    "welcomed",
    "criticised",
    "studied",
    "praised",
    "reviewed",
    "postponed",
    "inspected",
    "defended",
    "measured",
    "announced",
    "rejected",
    "documented",
    "compared",
    "photographed",
    "mapped",
    "funded",
    "debated",
    "counted",
    "tested",
    "redesigned",
    "celebrated",
    "examined",
    "audited",
]
PLACES = [
    "the old quarter",
    "the harbour",
    "the north bank",
    "the station square",
    "the town hall",
    "the ring road",
    "the west meadow",
    "the school yard",
    "the fire station",
    "the bus depot",
    "the riverside path",
    "the cathedral close",
    "the industrial estate",
    "the botanical garden",
    "the county archive",
]
LINKERS = [
    "On Monday",
    "Earlier this week",
    "According to a report",
    "In a statement",
    "After months of debate",
    "For the first time",
    "Despite the rain",
    "In the morning",
    "By the evening",
    "Last year",
]
ENDINGS = [
    "and promised more details soon.",
    "while critics asked for a full audit.",
    "which surprised many observers.",
    "after a long public meeting.",
    "as the season drew to a close.",
    "with support from neighbouring towns.",
    "though no final decision was taken.",
    "and published the figures online.",
    "despite concerns about the cost.",
    "to general applause.",
]
SWAP_WORDS = ["quickly", "briefly", "openly", "again", "finally", "carefully", "loudly", "quietly"]

VARIANT_ARTICLES = ("bridge", "library", "harvest", "marathon", "observatory")


def _article(slug: str) -> tuple[str, list[str]]:
    title, subjects, objects = TOPICS[slug]
    rng = random.Random(f"scrapy-neardup-demo:{slug}")
    paragraphs = []
    for _ in range(8):
        sentences = []
        for _ in range(rng.randint(3, 5)):
            sentences.append(
                f"{rng.choice(LINKERS)}, {rng.choice(subjects)} {rng.choice(VERBS)} {rng.choice(objects)} "
                f"{rng.randint(2, 97)} times near {rng.choice(PLACES)} {rng.choice(ENDINGS)}"
            )
        paragraphs.append(" ".join(sentences))
    return f"{title}: what happens next", paragraphs


def _edited(slug: str, paragraphs: list[str]) -> list[str]:
    rng = random.Random(f"edit:{slug}")
    words = " \n".join(paragraphs).split(" ")
    for i in rng.sample(range(len(words)), max(2, len(words) // 60)):
        words[i] = rng.choice(SWAP_WORDS)
    edited = " ".join(words).split(" \n")
    return edited + ["Update: this article was corrected after publication to fix two details."]


def _gazette(title: str, paragraphs: list[str], date: str = "12 March 2026", extra: str = "") -> str:
    nav = "".join(
        f'<li><a href="/section/{s}.html">{s.title()}</a></li>' for s in ("city", "sport", "culture", "weather")
    )
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} | Riverside Gazette</title>
<style>body{{font-family:serif}}</style><script>window.analytics = {{id: "RG-1"}};</script></head>
<body><header><h1 class="brand">Riverside Gazette</h1><nav><ul>{nav}</ul></nav></header>
<main><article><h1>{html.escape(title)}</h1><p class="byline">By staff reporter, {date}</p>{body}</article></main>
<aside><h2>Most read</h2><ul><li><a href="/index.html">Weather warning for the weekend</a></li>
<li><a href="/index.html">School board elects new chair</a></li></ul>{extra}</aside>
<footer><p>Riverside Gazette, 1 Quay Street. Subscribe to our newsletter. Contact the newsroom. Privacy policy.</p></footer>
</body></html>"""


def _valley_post(title: str, paragraphs: list[str]) -> str:
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} - The Valley Post</title></head>
<body><div id="top"><span class="logo">THE VALLEY POST</span> <a href="/partner/">Home</a> <a href="/partner/">Regional</a>
<a href="/partner/">Business</a> <a href="/partner/">Opinion</a></div>
<div class="content"><div class="story"><h2>{html.escape(title)}</h2><div class="meta">Syndicated from Riverside Gazette</div>
<div class="story-body">{body}</div></div>
<div class="ad">Advertisement: Valley Motors spring sale, zero percent financing on all models this month only.</div></div>
<div id="bottom">Copyright The Valley Post. All rights reserved. Terms of use. Cookie settings.</div></body></html>"""


def _print(title: str, paragraphs: list[str]) -> str:
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    return (
        f"<html><head><title>{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


NOISE_EXTRA = """<div class="ad">Sponsored: compare energy tariffs and save up to 300 a year with SwitchNow.</div>
<div class="related"><h3>Related</h3><ul><li>Council reveals summer roadworks plan</li>
<li>Local team wins regional cup</li><li>Views today: 4,812</li></ul></div>"""


def build_site() -> tuple[dict[str, tuple[str, bytes]], list[list[str]]]:
    """``({path: (content type, body)}, groups)``: every page, and the near-duplicate groups (by path)."""
    pages: dict[str, tuple[str, bytes]] = {}
    groups: list[list[str]] = []

    def page(path: str, text: str, ctype: str = "text/html; charset=utf-8") -> str:
        pages[path] = (ctype, text.encode("utf-8"))
        return path

    for slug in TOPICS:
        title, paragraphs = _article(slug)
        original = page(f"/news/{slug}.html", _gazette(title, paragraphs))
        if slug not in VARIANT_ARTICLES:
            continue
        group = [
            original,
            page(f"/mirror/news/{slug}.html", _gazette(title, paragraphs)),
            page(f"/print/{slug}.html", _print(title, paragraphs)),
            page(f"/partner/stories/{slug}.html", _valley_post(title, paragraphs)),
            page(
                f"/news/{slug}.html?utm_source=newsletter&utm_medium=email",
                _gazette(title, paragraphs, date="14 March 2026", extra=NOISE_EXTRA),
            ),
            page(f"/news/{slug}-updated.html", _gazette(title, _edited(slug, paragraphs), date="13 March 2026")),
        ]
        groups.append(group)
        page(f"/teasers/{slug}.html", _gazette(title, paragraphs[:1] + ["Subscribe to read the full story."]))

    # Short pages in the site's large template: their own text is too short to judge, so they pass
    # unchecked (neardup/skipped/too_little_text) instead of matching each other on the template.
    page("/about.html", _gazette("About us", ["The Riverside Gazette is an independent newspaper founded in 1921."]))
    page("/contact.html", _gazette("Contact", ["Write to desk@riverside.example or call 555 0100."]))
    page("/empty.html", "")
    page("/app.html", "<html><head><script src='/bundle.js'></script></head><body><div id='root'></div></body></html>")
    page("/feed.json", json.dumps({"items": list(TOPICS)}), "application/json")
    pages["/logo.png"] = ("image/png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    pages["/report.html"] = ("text/html", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\n" * 20)

    links = "".join(f'<li><a href="{html.escape(p)}">{html.escape(p)}</a></li>' for p in sorted(pages))
    page(
        "/index.html",
        f"<html><head><title>Demo site</title></head><body><h1>All pages</h1><ul>{links}</ul></body></html>",
    )
    return pages, groups


class DemoHandler(BaseHTTPRequestHandler):
    pages: dict[str, tuple[str, bytes]] = {}

    def do_GET(self) -> None:
        path = "/index.html" if self.path in ("/", "") else self.path
        found = self.pages.get(path)
        if found is None:
            self.send_error(404)
            return
        ctype, body = found
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def make_server(port: int = 0) -> ThreadingHTTPServer:
    """A server for the demo site on 127.0.0.1 (port 0: any free port); call ``serve_forever``."""
    pages, _ = build_site()
    handler = type("Handler", (DemoHandler,), {"pages": pages})
    return ThreadingHTTPServer(("127.0.0.1", port), handler)


#: The kind of each page of a group, in :func:`build_site`'s order.
KINDS = ("original", "mirror", "print", "syndicate", "noise", "edit")


def write_labelled(folder: str, site: str = "http://demo.test") -> int:
    """The site's articles as a labelled set for ``scrapy-neardup evaluate``: ``manifest.jsonl`` (one line a
    page: ``id``, ``url``, ``file``, ``cluster``, ``kind``) and each page gzipped beside it. Its teasers and
    short pages are clusters of their own. Returns the pages written."""
    import gzip

    pages, groups = build_site()
    cluster_of = {path: (f"g{i}", KINDS[group.index(path)]) for i, group in enumerate(groups) for path in group}
    os.makedirs(folder, exist_ok=True)
    rows = []
    for n, path in enumerate(sorted(p for p, (ctype, _) in pages.items() if ctype.startswith("text/html; charset"))):
        name = f"p{n:03d}.html.gz"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(gzip.compress(pages[path][1], mtime=0))
        cluster, kind = cluster_of.get(path, (f"s{n}", "original"))
        rows.append({"id": n, "url": site + path, "file": name, "cluster": cluster, "kind": kind})
    with open(os.path.join(folder, "manifest.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return len(rows)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--print-groups", action="store_true", help="print the near-duplicate groups as JSON and exit")
    parser.add_argument(
        "--labelled",
        metavar="FOLDER",
        help="write the site as a labelled set (manifest.jsonl and its pages) for scrapy-neardup evaluate, and exit",
    )
    return parser


def main() -> int:
    args = build_parser().parse_args()
    if args.print_groups:
        print(json.dumps(build_site()[1], indent=1))
        return 0
    if args.labelled:
        written = write_labelled(args.labelled)
        print(f"{written} labelled pages in {os.path.join(args.labelled, 'manifest.jsonl')}")
        return 0
    server = make_server(args.port)
    print(f"Demo site on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
