"""Settings for a distributed crawl: scrapy-redis shares the request queue and the URL dupefilter,
scrapy-neardup the content index, on one Redis server (``REDIS_URL``, or the environment's
``NEARDUP_EXAMPLE_REDIS_URL``).

    pip install scrapy-redis "scrapy-neardup[redis]"
    export SCRAPY_SETTINGS_MODULE=distributed_settings
    scrapy crawl news_redis &                                  # as many processes (and machines) as you like
    scrapy crawl news_redis &
    redis-cli lpush news_redis:start_urls http://127.0.0.1:8000/

Each process ends once it has had no work for MAX_IDLE_TIME_BEFORE_CLOSE seconds. A re-crawl: delete the
URL dupefilter first (``redis-cli del news_redis:dupefilter``), or scrapy-redis filters every URL it saw;
the content index is kept, and every unchanged page is *seen*. See docs/scaling.md.
"""

import os

from demo.settings import *  # noqa: F403

SPIDER_MODULES = ["demo_distributed.spiders"]
NEWSPIDER_MODULE = "demo_distributed.spiders"

# scrapy-redis: a shared scheduler queue and URL dupefilter.
SCHEDULER = "scrapy_redis.scheduler.Scheduler"
DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"
SCHEDULER_PERSIST = True
REDIS_URL = os.environ.get("NEARDUP_EXAMPLE_REDIS_URL", "redis://127.0.0.1:6379/0")
# A RedisSpider waits for start URLs forever unless told when to stop.
MAX_IDLE_TIME_BEFORE_CLOSE = 10

# scrapy-neardup: one near-duplicate index shared by every process, on the same server.
NEARDUP_STORE_URL = REDIS_URL
NEARDUP_REDIS_KEY = "neardup:{%(spider)s}"
NEARDUP_ON_STORE_ERROR = "pass"
