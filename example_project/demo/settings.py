BOT_NAME = "demo"
SPIDER_MODULES = ["demo.spiders"]
NEWSPIDER_MODULE = "demo.spiders"

ROBOTSTXT_OBEY = False
CONCURRENT_REQUESTS = 4
LOG_LEVEL = "INFO"
TELNETCONSOLE_ENABLED = False

# scrapy-neardup: the add-on registers the components; these settings are all a project needs.
ADDONS = {"scrapy_neardup.Addon": 300}
NEARDUP_ENABLED = True
NEARDUP_ACTION = "tag"  # "drop" skips near-duplicates entirely; "tag" marks their items
# NEARDUP_ALGORITHM = "minhash"
# NEARDUP_THRESHOLD = 0.5
# NEARDUP_STORE_URL = "sqlite:///.scrapy/neardup/demo.sqlite3"   (the default for spider "news")
