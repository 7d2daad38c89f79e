"""What the tests share: real crawls and HTTP servers (crawlkit), Redis servers and clusters of every kind
of the matrix (redis_server, redis_cluster), the stores each contract test runs on (stores), generated
sites and pages (sitegen, pages), processes that race for one store (racing), and the spiders the crawls
run (spiders/). The test folders import them as ``helpers.<module>`` (pytest's ``pythonpath``)."""

from __future__ import annotations

import os

#: The tests folder, the repository, and the spiders the crawls of the tests run.
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
SPIDERS = os.path.join(TESTS, "helpers", "spiders")
