"""NEARDUP_ITEM_FIELD in a real crawl: items that carry their own text are checked on it by the item pipeline."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import SPIDERS
from helpers.crawlkit import ServerThread, pages_server, read_result, scrapy_command
from helpers.pages import PATHS, first_pages

pytestmark = pytest.mark.slow


def test_items_carrying_their_own_text_are_checked_on_it(tmp_path):
    """NEARDUP_ITEM_FIELD: items are fingerprinted on their text field and dropped (or tagged) by the item
    pipeline; pages are not fingerprinted as well."""
    pages = first_pages()
    with ServerThread(pages_server(pages)) as server:
        paths_file = tmp_path / "paths.txt"
        paths_file.write_text("\n".join(PATHS))
        results = {}
        for action in ("drop", "tag"):
            settings = {
                "ADDONS": json.dumps({"scrapy_neardup.Addon": 300}),
                "NEARDUP_ENABLED": "True",
                "NEARDUP_ITEM_FIELD": "body",
                "NEARDUP_ACTION": action,
                "CONCURRENT_REQUESTS": "1",
                "NEARDUP_STORE_URL": f"sqlite:///{tmp_path}/{action}.sqlite3",
            }
            cmd, env, stats_file, items_file = scrapy_command(
                [
                    "runspider",
                    os.path.join(SPIDERS, "textitems.py"),
                    "-a",
                    f"base={server.url}",
                    "-a",
                    f"paths_file={paths_file}",
                ],
                tmp_path,
                settings,
                action,
            )
            proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
            results[action] = read_result(proc.returncode, stats_file, items_file, proc.stdout + proc.stderr)
            assert results[action].returncode == 0, results[action].log[-2000:]
    base = server.url.rstrip("/")
    copies = {f"{base}/a/1", f"{base}/print/1"}  # one story under two URLs; which is checked first may vary
    dropped = results["drop"]
    kept = {i["url"] for i in dropped.items}
    assert len(kept & copies) == 1 and kept - copies == {base + p for p in PATHS} - copies
    assert dropped.stats["neardup/duplicate"] == 1 and dropped.stats["neardup/dropped"] == 1
    assert "neardup/skipped/not_html" not in dropped.stats  # pages are not fingerprinted as well
    tagged = {i["url"]: i["near_duplicate_of"] for i in results["tag"].items}
    assert {(url, tagged[url]) for url in copies if tagged[url]} in (
        {(f"{base}/print/1", f"{base}/a/1")},
        {(f"{base}/a/1", f"{base}/print/1")},
    )
    assert all(tagged[url] is None for url in tagged if url not in copies)
    assert results["tag"].stats["neardup/items/tagged"] == 1
