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

#: Each component: the setting that lists it, and its order there (the module's docstring says why).
COMPONENTS = {
    "scrapy_neardup.NearDupDownloaderMiddleware": ("DOWNLOADER_MIDDLEWARES", 540),
    "scrapy_neardup.NearDupSpiderMiddleware": ("SPIDER_MIDDLEWARES", 100),
    "scrapy_neardup.NearDupPipeline": ("ITEM_PIPELINES", 100),
}


class Addon:
    def update_settings(self, settings: BaseSettings) -> None:
        from scrapy.utils.misc import load_object

        for component, (setting, order) in COMPONENTS.items():
            # The class, not its path: Scrapy compares what a project lists, loaded, with it (a path never
            # matched, and the project's own order was overwritten).
            settings.setdefault_in_component_priority_dict(setting, load_object(component), order)
