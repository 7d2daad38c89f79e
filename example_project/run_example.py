"""Run the example end to end: serve the demo site on 127.0.0.1, crawl it twice with scrapy-neardup.

    python run_example.py

The first crawl starts from an empty store (NEARDUP_RESET) and tags near-duplicates; the second crawl
reuses the SQLite store that the first one left in .scrapy/neardup/news.sqlite3 and finds every page
already known. Items are written to items.jsonl.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from demo_site import build_site, make_server  # noqa: E402

SUMMARY = re.compile(r"scrapy-neardup: (\d+) pages checked: (\d+) unique, (\d+) near-duplicates")


def crawl(site: str, *settings: str) -> tuple[int, dict[str, int]]:
    """Run the crawl, its log shown as it goes; its exit status and the plugin's closing counts."""
    cmd = [sys.executable, "-m", "scrapy", "crawl", "news", "-a", f"site={site}", "-O", "items.jsonl"]
    for setting in settings:
        cmd += ["-s", setting]
    counts: dict[str, int] = {}
    proc = subprocess.Popen(cmd, cwd=HERE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        sys.stderr.write(line)
        found = SUMMARY.search(line)
        if found:
            counts = dict(zip(("checked", "unique", "duplicates"), map(int, found.groups())))
    return proc.wait(), counts


def read_items() -> list[dict]:
    with open(os.path.join(HERE, "items.jsonl")) as f:
        return [json.loads(line) for line in f]


def show_groups(items: list[dict], site: str) -> None:
    """Each group's name, then its tagged members with their similarity."""
    groups: dict[str, list[dict]] = {}
    for item in items:
        if item.get("near_duplicate_of"):
            groups.setdefault(item["near_duplicate_of"], []).append(item)
    for name, members in sorted(groups.items()):
        print(f"   {name.replace(site, '/')}")
        for item in sorted(members, key=lambda i: i["url"]):
            print(f"      ~ {item['url'].replace(site, '/')}  ({item['near_duplicate_similarity']:.2f})")


def main() -> int:
    server = make_server(0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{server.server_address[1]}/"
    pages, groups = build_site()
    html_pages = sum(1 for ctype, _ in pages.values() if ctype.startswith("text/html"))
    print(
        f"== Demo site on {site}: {len(pages)} files, {html_pages} of them HTML pages; {len(groups)} groups of "
        f"near-duplicates ({sum(len(g) for g in groups)} pages: mirror, print, syndicated, noisy and edited "
        "copies of one article each), and / is /index.html again; the rest are distinct articles, teasers, "
        "short pages and junk the plugin passes unchecked"
    )
    try:
        print("== Crawl 1: empty store, tag mode")
        status, counts = crawl(site, "NEARDUP_RESET=True")
        if status:
            return 1
        items = read_items()
        tagged = [i for i in items if i.get("near_duplicate_of")]
        untagged = counts.get("duplicates", 0) - len(tagged)
        print(
            f"== {counts.get('checked', 0)} pages checked, {counts.get('duplicates', 0)} of them near-duplicates; "
            f"the spider made {len(items)} items, {len(tagged)} of them tagged as near-duplicates"
            + (
                f" ({untagged} near-duplicate page{'s' if untagged != 1 else ''} gave no item: / is /index.html "
                "again, and the spider makes items of articles only)"
                if untagged
                else ""
            )
            + "; each group named after the page it first reached the spider through:"
        )
        show_groups(items, site)
        print("== Crawl 2: same store; every page is already known")
        status, counts = crawl(site)
        if status:
            return 1
        print("== The groups as the store keeps them, each named after its best copy (what crawl 2 tagged):")
        show_groups(read_items(), site)
        return 0
    finally:
        server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
