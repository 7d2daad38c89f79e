"""What the soft-404 check remembers per host on a broad crawl.

    python3 dev.py bench bench/soft404_hosts.py ../shared/neardup-dev [--hosts 100000 200000]

The crawler process keeps each host's probe outcome (:class:`~scrapy_neardup.crawl.soft404.HostAnswers`, up to
``MAX_PROBED_HOSTS``): nothing for a host that answered the probe with a 404 or a redirect, the URL asked and
the answer's fingerprint signature for a soft-404 host. This fingerprints neardup-dev's real pages with the
default algorithm (their signatures stand for the answers' own), then has a ``HostAnswers`` meet ``--hosts``
hosts, host *i* under the name ``h<i>.<host of the set's page i mod n>``, with a soft-404 answer on every
``--soft-every``-th (default 20: 5 %, within the 3-7 % of servers the surveys find).

Printed as JSON for each number of hosts: the hosts remembered at the end, and the bytes held per host
remembered (``tracemalloc``, each answer's signature a copy of its own; after a first, untraced use of the
same code, whose one-time allocations would otherwise count): in all, and for a crawl where every
host or no host is a soft-404 host.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tracemalloc
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scrapy_neardup.assembly import build_algorithm
from scrapy_neardup.crawl.soft404 import HostAnswer, HostAnswers
from scrapy_neardup.engine.extract import page_text
from scrapy_neardup.offline.evaluation import load_manifest, read_page
from scrapy_neardup.settings import Config


def real_answers(dataset: str, count: int = 200) -> list[tuple[str, bytes]]:
    """(host, signature) of the set's first ``count`` pages, each fingerprinted on its whole text."""
    algorithm = build_algorithm(Config.from_settings({}))
    out = []
    for row in load_manifest(os.path.join(dataset, "manifest.jsonl"))[:count]:
        text = page_text(read_page(os.path.join(dataset, row["file"])))
        out.append((urlsplit(row["url"]).hostname or "nohost", algorithm.fingerprint(text).signature))
    return out


def bytes_a_host(answers: list[tuple[str, bytes]], hosts: int, soft_every: int) -> tuple[int, float]:
    """Hosts remembered, and bytes held a host remembered."""
    remembered = HostAnswers()

    async def meet(first: int, last: int) -> None:
        for i in range(first, last):
            host, signature = answers[i % len(answers)]

            async def probe(url: str, i: int = i, signature: bytes = signature) -> HostAnswer | None:
                soft = soft_every and i % soft_every == 0
                return HostAnswer(url, bytes(bytearray(signature)), "") if soft else None

            await remembered.answer(f"http://h{i}.{host}/a/{i}", probe)

    loop = asyncio.new_event_loop()
    try:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        loop.run_until_complete(meet(0, hosts))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    finally:
        loop.close()
    return len(remembered), held / len(remembered)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--hosts", type=int, nargs="+", default=[100_000, 200_000])
    parser.add_argument("--soft-every", type=int, default=20)
    args = parser.parse_args()
    answers = real_answers(args.dataset)
    bytes_a_host(answers, 2000, 1)  # what the first use allocates once (the loop's and the modules' own)
    rows = {}
    for hosts in args.hosts:
        kept, mixed = bytes_a_host(answers, hosts, args.soft_every)
        _, none = bytes_a_host(answers, hosts, 0)
        _, every = bytes_a_host(answers, hosts, 1)
        rows[str(hosts)] = {
            "hosts_remembered": kept,
            "bytes_a_host": round(mixed),
            "bytes_a_host_no_soft404": round(none),
            "bytes_a_host_all_soft404": round(every),
        }
    print(json.dumps({"command": " ".join(["bench/soft404_hosts.py", *sys.argv[1:]]), "hosts": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
