"""A template-rich site from real pages, as a labelled set in neardup-dev's format.

    python3 dev.py bench bench/template_site.py ../shared/neardup-dev OUT_DIR [--templates 30] [--per 24]

neardup-dev has few pages a host, as a labelled set must; a real crawl meets thousands of pages of one
template. This builds a set that has both the real templates and many pages of each: ``--templates`` real
pages of neardup-dev (originals of distinct hosts whose article sits in one element, and where trafilatura
finds another article put in its place) keep their whole page (navigation, sidebars, comments, related
lists, footer) and have their article, the paragraphs trafilatura extracts, replaced by other real
articles' paragraphs (``--per`` a template, each article once, one original a cluster of neardup-dev; past
the set's articles, their real paragraphs recombined, none over ``MAX_RECOMBINED_CHARS``), the page's
``<h1>`` and ``<title>`` by the article's title. As the set's ``syndicate`` pages are made, here by
template (Bar-Yossef & Rajagopalan, WWW 2002: a template is what many pages of a site share).

Near-duplicate copies, each labelled with its article: 10 % of the articles *crossposted* (the same article
in another template of the site, as a story under two sections), 5 % *mirrored* (the identical page under
another path), 5 % *noisy* (an "Updated" line, a figure changed, 2 % of words replaced).

Every page is on one host (``template.example``, one path a template): ``OUT_DIR/manifest.jsonl`` and
``OUT_DIR/pages/*.html.gz``, which ``evaluate``, ``bench/bench_crawl.py`` and ``bench/learned_templates.py``
read as they read neardup-dev.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import random
import sys
from urllib.parse import urlsplit

import lxml.html

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scrapy_neardup.engine.extract import decode_html, main_text
from scrapy_neardup.engine.learned import word_pairs, words
from scrapy_neardup.offline.evaluation import load_manifest, read_page

HOST = "template.example"
#: The longest paragraph a recombined article shows: longer ones are whole blocks of a page, not paragraphs.
MAX_RECOMBINED_CHARS = 2000


def article_paragraphs(html: str) -> list[str]:
    """trafilatura's main text of a real page, a paragraph a line (lines of fewer than 4 words dropped)."""
    return [line for line in main_text(html).splitlines() if len(line.split()) >= 4]


def article_container(doc: lxml.html.HtmlElement, paragraphs: list[str]) -> tuple[lxml.html.HtmlElement, list] | None:
    """The element whose ``<p>`` children hold the article, and those ``<p>``: the parent of most
    paragraphs whose words are in the main text; ``None`` when they hold less than 60 % of it."""
    main_pairs = word_pairs(words(" ".join(paragraphs)))
    if not main_pairs:
        return None
    by_parent: dict[lxml.html.HtmlElement, list] = {}
    for p in doc.iter("p"):
        own = word_pairs(words(p.text_content()))
        if len(own) >= 4 and len(own & main_pairs) >= 0.8 * len(own):
            parent = p.getparent()
            if parent is not None:
                by_parent.setdefault(parent, []).append(p)
    if not by_parent:
        return None
    parent, ps = max(by_parent.items(), key=lambda item: len(item[1]))
    held = set().union(*(word_pairs(words(p.text_content())) for p in ps)) & main_pairs
    if len(held) < 0.6 * len(main_pairs) or len(ps) < 3:
        return None
    return parent, ps


def extracts_articles(doc: lxml.html.HtmlElement, found: tuple, articles: list[tuple[str, list[str]]]) -> bool:
    """Whether trafilatura finds the article in this template when it is filled with others (tried with
    the first two articles met): a template where it finds the page's own template text instead is a trap
    for trafilatura itself, not a measure of what learning it costs."""
    if len(articles) < 2:
        return False
    container, ps = found
    path = doc.getroottree().getpath(container)
    for p in ps:
        p.set("data-article", "")
    for title, paragraphs in articles[:2]:
        got = main_text(fill(doc, path, title, paragraphs).decode())
        article, extracted = word_pairs(words(" ".join(paragraphs))), word_pairs(words(got))
        if (
            not extracted
            or len(article & extracted) < 0.9 * len(article)
            or len(article & extracted) < 0.8 * len(extracted)
        ):
            for p in ps:
                del p.attrib["data-article"]
            return False
    return True


def fill(template: lxml.html.HtmlElement, container_path: str, title: str, paragraphs: list[str]) -> bytes:
    """The template page with its article replaced: the container's article ``<p>`` (marked at build) gone,
    the new paragraphs where the first was, the title in ``<h1>`` and ``<title>``."""
    doc = copy.deepcopy(template)
    container = doc.xpath(container_path)[0]
    old = [p for p in container if p.get("data-article") is not None]
    at = container.index(old[0])
    tail = old[-1].tail
    for p in old:
        container.remove(p)
    for i, text in enumerate(paragraphs):
        p = lxml.html.Element("p")
        p.text = text
        p.tail = "\n"
        container.insert(at + i, p)
    if tail:
        container[at + len(paragraphs) - 1].tail = tail
    for h1 in doc.iter("h1"):
        for child in list(h1):
            h1.remove(child)
        h1.text = title
        break
    for t in doc.iter("title"):
        t.text = title
        break
    return lxml.html.tostring(doc, encoding="utf-8", doctype="<!DOCTYPE html>")


def build(dataset: str, out: str, templates: int, per: int, seed: int = 7) -> dict[str, int]:
    rng = random.Random(seed)
    rows = [r for r in load_manifest(os.path.join(dataset, "manifest.jsonl")) if r["kind"] == "original"]
    rng.shuffle(rows)
    chosen: list[tuple[lxml.html.HtmlElement, str, str]] = []  # template doc, container path, source host
    articles: list[tuple[str, list[str]]] = []
    hosts: set[str] = set()
    clusters: set[str] = set()
    for row in rows:
        if row["cluster"] in clusters:
            continue  # neardup-dev's merged clusters hold two originals that are near-duplicates: one of each
        clusters.add(row["cluster"])
        html = decode_html(read_page(os.path.join(dataset, row["file"])))
        paragraphs = article_paragraphs(html)
        host = urlsplit(row["url"]).netloc or row["url"]
        if len(chosen) < templates and host not in hosts:
            try:
                doc = lxml.html.document_fromstring(html)
            except ValueError:  # an XML declaration in the page: not a template to build on
                continue
            found = article_container(doc, paragraphs)
            if found is not None and extracts_articles(doc, found, articles):
                container, ps = found
                for p in ps:
                    p.set("data-article", "")
                chosen.append((doc, doc.getroottree().getpath(container), host))
                hosts.add(host)
                continue
        if len(" ".join(paragraphs)) >= 600 and len(paragraphs) >= 3:
            articles.append((row.get("source") or paragraphs[0][:80], paragraphs))
    own = len(articles)
    if len(articles) < templates * per:
        # More articles than the set has: real paragraphs recombined, five to nine an article, none twice in
        # one. Two such articles share a paragraph now and then, far below any threshold. A few "paragraphs"
        # are whole blocks of a page (a list of 7,319 characters, a run of 21,733): at 100,000 pages each is
        # drawn into about 30 articles, which it would make near-duplicates of each other though they are
        # labelled distinct. A recombined article does not show one (below: its draw, and so every other
        # article and copy, stays what an earlier build made).
        pool = [p for _, ps in articles for p in ps]
        while len(articles) < templates * per:
            paragraphs = rng.sample(pool, rng.randint(5, 9))
            articles.append((" ".join(paragraphs[0].split()[:8]), paragraphs))
    if len(chosen) < templates or len(articles) < templates * per:
        raise SystemExit(f"only {len(chosen)} templates and {len(articles)} articles found")
    os.makedirs(os.path.join(out, "pages"), exist_ok=True)
    manifest = []
    counts = {"original": 0, "crosspost": 0, "mirror": 0, "noise": 0}

    def write(kind: str, cluster: str, url: str, body: bytes) -> None:
        name = f"t{len(manifest):05d}"
        with gzip.open(os.path.join(out, "pages", name + ".html.gz"), "wb") as f:
            f.write(body)
        manifest.append({"id": name, "url": url, "file": f"pages/{name}.html.gz", "cluster": cluster, "kind": kind})
        counts[kind] += 1

    vocabulary = [w for _, ps in articles[:50] for p in ps for w in p.split()]
    n = 0
    for t, (doc, path, _) in enumerate(chosen):
        for i in range(per):
            title, drawn = articles[n]
            shown = [n < own or len(p) <= MAX_RECOMBINED_CHARS for p in drawn]
            paragraphs = [p for p, show in zip(drawn, shown) if show]
            cluster = f"a{n:04d}"
            url = f"https://{HOST}/t{t:02d}/article-{n}.html"
            write("original", cluster, url, fill(doc, path, title, paragraphs))
            draw = rng.random()
            copy: tuple[str, str, bytes] | None = None  # kind, URL, page
            if draw < 0.10:
                other = rng.choice([k for k in range(len(chosen)) if k != t])
                o_doc, o_path, _ = chosen[other]
                copy = (
                    "crosspost",
                    f"https://{HOST}/t{other:02d}/story-{n}.html",
                    fill(o_doc, o_path, title, paragraphs),
                )
            elif draw < 0.15:
                copy = (
                    "mirror",
                    f"https://{HOST}/mirror/t{t:02d}/article-{n}.html",
                    fill(doc, path, title, paragraphs),
                )
            elif draw < 0.20:
                noisy = [
                    " ".join(rng.choice(vocabulary) if rng.random() < 0.02 else w for w in p.split()) for p in drawn
                ]
                noisy = [p for p, show in zip(noisy, shown) if show]
                day, year, hour, minute = (
                    rng.randint(1, 28),
                    rng.randint(2019, 2025),
                    rng.randint(1, 12),
                    rng.randint(10, 59),
                )
                noisy.insert(0, f"Updated {day} March {year}, {hour}:{minute}")
                copy = ("noise", f"https://{HOST}/t{t:02d}/article-{n}.html?rev=2", fill(doc, path, title, noisy))
            if copy is not None:
                write(copy[0], cluster, copy[1], copy[2])
            n += 1
    with open(os.path.join(out, "manifest.jsonl"), "w", encoding="utf-8") as f:
        for row in manifest:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset")
    parser.add_argument("out")
    parser.add_argument("--templates", type=int, default=30)
    parser.add_argument("--per", type=int, default=24)
    args = parser.parse_args()
    print(json.dumps(build(args.dataset, args.out, args.templates, args.per)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
