"""The Scrapy add-on: ``ADDONS = {"scrapy_neardup.Addon": 300}`` plus ``NEARDUP_ENABLED = True``.

Component order numbers, chosen on purpose:

* downloader middleware **540**: below RetryMiddleware (550), HttpCompressionMiddleware (590) and
  RedirectMiddleware (600), whose ``process_response`` therefore runs first: the page checked is the final,
  decompressed one;
* spider middleware **100**: tags the items a page yields after the built-in filters (depth, URL length)
  have run, close to the engine;
* item pipeline **100**: early, so later pipelines (exporters, storage) see the tags or never see dropped
  items.

Each is added with ``setdefault``, so a project that lists a component itself keeps its own order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

DOWNLOADER_MIDDLEWARE = "scrapy_neardup.NearDupDownloaderMiddleware"
SPIDER_MIDDLEWARE = "scrapy_neardup.NearDupSpiderMiddleware"
PIPELINE = "scrapy_neardup.NearDupPipeline"
#: Each component: the setting that lists it, and its order there (the module's docstring says why).
COMPONENTS = {
    DOWNLOADER_MIDDLEWARE: ("DOWNLOADER_MIDDLEWARES", 540),
    SPIDER_MIDDLEWARE: ("SPIDER_MIDDLEWARES", 100),
    PIPELINE: ("ITEM_PIPELINES", 100),
}


class Addon:
    def update_settings(self, settings: BaseSettings) -> None:
        for component, (setting, order) in COMPONENTS.items():
            settings.setdefault_in_component_priority_dict(setting, component, order)  # type: ignore[arg-type]
