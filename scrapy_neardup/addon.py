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

With the plugin enabled and extraction in worker processes, the add-on also has the workers' fork server
start (:func:`~scrapy_neardup.workers.start_fork_server`): it imports the extraction modules while Scrapy
builds the rest of the crawl, instead of after the spider opens, when every page fetched would wait for it.
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
        _start_fork_server(settings)


def _start_fork_server(settings: BaseSettings) -> None:
    """Start the workers' fork server if this crawl will have workers. An economy only: a bad setting is left
    to the crawl's start-up, which fails on it in one line, and a fork server that cannot start now is
    started again, or said why not, when the workers are."""
    from .settings import Config
    from .workers import start_fork_server

    try:
        config = Config.from_settings(settings)
        if config.enabled and config.resolved_workers() > 0:
            start_fork_server()
    except Exception:  # noqa: BLE001 - see the docstring: nothing here may fail the crawl's start-up
        return
