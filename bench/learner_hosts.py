"""What the learned templates' bookkeeping costs on a broad crawl: many hosts, a few pages each.

    python3 dev.py bench bench/learner_hosts.py ../shared/neardup-dev [--hosts 100000 200000] [--repeat 3]

A broad crawl meets most of its hosts on a few pages, and every host met is remembered by the crawler
process's :class:`~scrapy_neardup.engine.learned.TemplateLearner` (up to ``MAX_SEEN_HOSTS``), and by each
worker's own. This reads the set's real pages once (each page's host, its pre-key, and its template key from
lexbor's tree), then feeds a learner a crawl of ``--hosts`` hosts: host *i* is the set's host *i mod n*
under a name of its own (``h<i>.<host>``), with that host's real pages in the set's order. Each page is
handled as the crawl handles it: its host's offers made and pickled (what a page goes to a worker with), its
template passed only when its pre-key is among the offered ones or the offers say every page of the host
is parsed (as a worker parses only then), then observed.

Printed as JSON for each number of hosts: the hosts the learner remembers at the end, the bytes it holds per
host remembered (``tracemalloc``, in a learner of its own, its pages fed while tracing), the objects the
garbage collector tracks for it per host, the CPU microseconds a page (offers made, pickled, observed;
medians of ``--repeat`` runs without tracing), and the mean size of a page's pickled offers.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import statistics
import sys
import time
import tracemalloc
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scrapy_neardup.engine import learned
from scrapy_neardup.engine.extract import decode_html
from scrapy_neardup.engine.learned import TemplateLearner
from scrapy_neardup.offline.evaluation import load_manifest, read_page

#: Whether a key is among a host's offered ones (``in_bits`` before the offers carried sparse sets).
_OFFERED = getattr(learned, "in_keys", None) or learned.in_bits


def real_hosts(dataset: str) -> list[list[tuple[int, int | None]]]:
    """Each host's pages of the set, in its order, as ``(pre-key, template key)`` (``None``: not parsed)."""
    pages: dict[str, list[tuple[int, int | None]]] = {}
    for record in load_manifest(os.path.join(dataset, "manifest.jsonl")):
        host = urlsplit(record["url"]).hostname
        if not host:
            continue
        html = decode_html(read_page(os.path.join(dataset, record["file"])))
        tree = learned.parse(html)
        pages.setdefault(host, []).append((learned.prekey(html), None if tree is None else learned.skeleton_key(tree)))
    return list(pages.values())


def crawl(learner: TemplateLearner, hosts: list[list[tuple[int, int | None]]], count: int) -> tuple[int, int]:
    """Feed ``learner`` the pages of ``count`` hosts; the pages fed and the bytes of their pickled offers."""
    pages = offered_bytes = 0
    for i in range(count):
        name = f"h{i}.{i % len(hosts)}.example"
        for prekey, template in hosts[i % len(hosts)]:
            offers = learner.offers(name)
            offered_bytes += len(pickle.dumps(offers, protocol=pickle.HIGHEST_PROTOCOL))
            parsed = template if getattr(offers, "parse_all", False) or _OFFERED(offers.parse, prekey) else None
            learner.observe(name, parsed, "", None, prekey)
            pages += 1
    return pages, offered_bytes


def measure(hosts: list[list[tuple[int, int | None]]], count: int, repeat: int) -> dict:
    seconds = []
    for _ in range(repeat):
        learner = TemplateLearner("trafilatura bench")
        started = time.process_time()
        pages, offered_bytes = crawl(learner, hosts, count)
        seconds.append(time.process_time() - started)
    del learner
    gc.collect()
    tracked_before = len(gc.get_objects())
    tracemalloc.start()
    learner = TemplateLearner("trafilatura bench")
    crawl(learner, hosts, count)
    held, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    tracked = len(gc.get_objects()) - tracked_before
    remembered = len(learner._hosts)
    return {
        "hosts": count,
        "pages": pages,
        "hosts_remembered": remembered,
        "bytes_per_host": round(held / remembered),
        "megabytes": round(held / 2**20, 1),
        "tracked_objects_per_host": round(tracked / remembered, 2),
        "cpu_us_per_page": round(statistics.median(seconds) / pages * 1e6, 2),
        "offers_pickled_bytes_per_page": round(offered_bytes / pages),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a labelled set of pages (neardup-dev's format)")
    parser.add_argument("--hosts", type=int, nargs="+", default=[100_000], help="hosts crawled (default 100000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs a number of hosts (the median)")
    args = parser.parse_args()
    hosts = real_hosts(args.dataset)
    runs = [measure(hosts, count, args.repeat) for count in args.hosts]
    print(
        json.dumps(
            {
                "command": "bench/learner_hosts.py " + " ".join(sys.argv[1:]),
                "set_hosts": len(hosts),
                "set_pages_per_host": round(sum(map(len, hosts)) / len(hosts), 2),
                "runs": runs,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
