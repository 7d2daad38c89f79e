"""Helpers for end-to-end tests: real ``scrapy crawl`` processes against HTTP servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass

from scrapy import signals

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLE = os.path.join(ROOT, "example_project")


class StatsToFile:
    """Test-only extension: writes the crawl's final stats as JSON to the ``TEST_STATS_FILE`` setting."""

    def __init__(self, crawler):
        self.crawler = crawler
        self.path = crawler.settings.get("TEST_STATS_FILE")
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def closed(self, spider, reason):
        if self.path:
            with open(self.path, "w") as f:
                json.dump(self.crawler.stats.get_stats(), f, default=str)


@dataclass
class CrawlResult:
    returncode: int
    stats: dict
    items: list
    log: str

    def neardup_stats(self):
        return {k: v for k, v in self.stats.items() if k.startswith("neardup/")}


def run_scrapy(args, tmp_path, settings=None, cwd=EXAMPLE, timeout=120, name="crawl"):
    stats_file = tmp_path / f"{name}-stats.json"
    items_file = tmp_path / f"{name}-items.jsonl"
    all_settings = {
        "EXTENSIONS": json.dumps({"crawlkit.StatsToFile": 0}),
        "TEST_STATS_FILE": str(stats_file),
        "LOG_LEVEL": "DEBUG",
        **(settings or {}),
    }
    cmd = [sys.executable, "-m", "scrapy", *args, "-O", f"{items_file}:jsonlines"]
    for key, value in all_settings.items():
        cmd += ["-s", f"{key}={value}"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, ROOT, env.get("PYTHONPATH", "")])
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    stats = json.loads(stats_file.read_text()) if stats_file.exists() else {}
    items = [json.loads(line) for line in items_file.read_text().splitlines()] if items_file.exists() else []
    return CrawlResult(proc.returncode, stats, items, proc.stdout + proc.stderr)


class ServerThread:
    """Runs an ``http.server`` server in a thread for a ``with`` block."""

    def __init__(self, server):
        self.server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}/"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
