"""Settings for a distributed crawl: scrapy-redis shares the request queue, scrapy-neardup the content index.

    pip install scrapy-redis "scrapy-neardup[redis]"
    SCRAPY_SETTINGS_MODULE=distributed_settings scrapy crawl news -a site=http://127.0.0.1:8000/

Run the same command in as many processes (and machines) as you like, against one Redis server.
"""

from demo.settings import *  # noqa: F401,F403

# scrapy-redis: a shared scheduler queue and URL dupefilter.
SCHEDULER = "scrapy_redis.scheduler.Scheduler"
DUPEFILTER_CLASS = "scrapy_redis.dupefilter.RFPDupeFilter"
SCHEDULER_PERSIST = True
REDIS_URL = "redis://127.0.0.1:6379/0"

# scrapy-neardup: one near-duplicate index shared by every process, on the same server.
NEARDUP_STORE_URL = REDIS_URL
NEARDUP_REDIS_KEY = "neardup:{%(spider)s}"
NEARDUP_ON_STORE_ERROR = "pass"
