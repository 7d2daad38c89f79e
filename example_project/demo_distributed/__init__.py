"""The demo crawl distributed with scrapy-redis: a shared request queue and URL dupefilter (scrapy-redis) and
a shared content index (scrapy-neardup), on one Redis server. See ``distributed_settings.py``."""
