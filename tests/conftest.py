import os
import sys

import pytest

from scrapy_neardup.store import MemoryStore, SqliteStore

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "example_project"))
sys.path.insert(0, HERE)

STORE_BACKENDS = ["memory", "sqlite"]
#: Backends whose data outlives the process.
PERSISTENT_BACKENDS = ["sqlite"]


def make_store(kind, tmp_path, name="store"):
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(str(tmp_path / f"{name}.sqlite3"), commit_every=3, commit_secs=60)
    raise AssertionError(kind)


@pytest.fixture(params=STORE_BACKENDS)
def store_kind(request):
    return request.param
