"""Reproduce the native crash of trafilatura/lxml on several threads of one process, and test a cause.

    python bench/threads_crash_repro.py ../shared/neardup-dev --runs 30 --threads 12 \
        [--variant stock|thread-parser|thread-xpath|thread-local]

Each run is a fresh Python process (``PYTHONFAULTHANDLER=1``) that extracts every page of the set with
``trafilatura.extract`` on ``--threads`` threads, as the plugin did before its extraction moved to worker
processes. A run that dies on a signal (SIGABRT from glibc's ``double free or corruption``, SIGSEGV) is a
crash; the script prints one JSON line with the counts and the stack of the crashing thread of each.

Variants: ``stock`` is trafilatura as installed; ``thread-parser`` replaces trafilatura's module-level
``HTML_PARSER`` (one ``lxml.html.HTMLParser`` object that every thread parses with) by one parser per
thread; ``thread-xpath`` compiles every ``lxml.etree.XPath`` once per thread instead (lxml.html
and trafilatura compile dozens at import, in the importing thread, and evaluate them from every thread;
each object locks only itself, and evaluation runs with the GIL released); ``thread-local`` does both. A
variant whose crash rate falls
to zero where stock crashes points at what it makes thread-local.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

CHILD = r"""
import gzip, json, os, sys, threading
from concurrent.futures import ThreadPoolExecutor
variant, directory, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
if variant in ("thread-local", "thread-xpath"):
    import lxml.etree
    compile_xpath = lxml.etree.XPath
    class ThreadLocalXPath:
        # Compiles the expression once per thread, on first use there (lxml.html and trafilatura compile
        # theirs at import, in the importing thread, and then evaluate them from every thread).
        def __init__(self, *args, **kwargs):
            self._args, self._kwargs, self._local = args, kwargs, threading.local()
            self.path = args[0] if args else kwargs.get("path")
        def __call__(self, *args, **kwargs):
            compiled = getattr(self._local, "xpath", None)
            if compiled is None:
                compiled = self._local.xpath = compile_xpath(*self._args, **self._kwargs)
            return compiled(*args, **kwargs)
    lxml.etree.XPath = ThreadLocalXPath
import trafilatura, trafilatura.utils as tu
if variant in ("thread-parser", "thread-local"):
    import lxml.html
    local = threading.local()
    options = dict(collect_ids=False, default_doctype=False, encoding="utf-8", remove_comments=True,
                   remove_pis=True)
    class PerThreadParser:
        def __getattr__(self, name):
            parser = getattr(local, "parser", None)
            if parser is None:
                parser = local.parser = lxml.html.HTMLParser(**options)
            return getattr(parser, name)
    original_fromstring = tu.fromstring
    def fromstring(data, parser=None, **kw):
        if parser is not None:
            p = getattr(local, "parser", None)
            if p is None:
                p = local.parser = lxml.html.HTMLParser(**options)
            parser = p
        return original_fromstring(data, parser=parser, **kw)
    tu.fromstring = fromstring
rows = [json.loads(l) for l in open(os.path.join(directory, "manifest.jsonl"))]
pages = [gzip.decompress(open(os.path.join(directory, r["file"]), "rb").read()) for r in rows]
def work(i):
    return len(trafilatura.extract(pages[i], url=rows[i]["url"], favor_recall=True, include_comments=False,
                                   include_tables=True, deduplicate=False, with_metadata=False) or "")
with ThreadPoolExecutor(threads) as pool:
    total = sum(pool.map(work, range(len(pages))))
print(json.dumps({"pages": len(pages), "chars": total}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=12)
    parser.add_argument(
        "--variant", choices=("stock", "thread-parser", "thread-xpath", "thread-local"), default="stock"
    )
    args = parser.parse_args()
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    crashes, seconds = [], []
    for run in range(args.runs):
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, args.variant, args.dataset, str(args.threads)],
            capture_output=True,
            text=True,
            env=env,
        )
        seconds.append(time.perf_counter() - started)
        if proc.returncode != 0:
            lines = proc.stderr.splitlines()
            first = next(
                (
                    i
                    for i, line in enumerate(lines)
                    if line.startswith(("Fatal Python", "double free", "free()", "malloc"))
                ),
                0,
            )
            crashes.append(
                {
                    "run": run,
                    "signal": signal.Signals(-proc.returncode).name if proc.returncode < 0 else proc.returncode,
                    "stderr_head": lines[max(0, first - 2) : first + 30],
                }
            )
    print(
        json.dumps(
            {
                "variant": args.variant,
                "runs": args.runs,
                "threads": args.threads,
                "crashed": len(crashes),
                "median_run_seconds": round(sorted(seconds)[len(seconds) // 2], 1),
                "crashes": crashes,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
