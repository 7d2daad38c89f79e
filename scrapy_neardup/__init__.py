"""scrapy-neardup: find near-duplicate pages while Scrapy crawls, and drop or tag them.

Algorithm modules (:mod:`scrapy_neardup.engine`) and stores (:mod:`scrapy_neardup.store`) know nothing of
Scrapy; the components exported here are thin layers over them. They are imported on first use, so the
engine, the stores and the ``scrapy-neardup`` command do not pay for importing Scrapy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .addon import Addon
    from .crawl.downloader import NearDupDownloaderMiddleware
    from .crawl.items import NearDupPipeline
    from .crawl.spider import NearDupSpiderMiddleware
    from .settings import Config, ConfigError

__all__ = [
    "Addon",
    "Config",
    "ConfigError",
    "NearDupDownloaderMiddleware",
    "NearDupPipeline",
    "NearDupSpiderMiddleware",
    "__version__",
]

_EXPORTS = {
    "Addon": ".addon",
    "Config": ".settings",
    "ConfigError": ".settings",
    "NearDupDownloaderMiddleware": ".crawl.downloader",
    "NearDupPipeline": ".crawl.items",
    "NearDupSpiderMiddleware": ".crawl.spider",
}
assert set(__all__) == {*_EXPORTS, "__version__"}  # one list for readers and linters, checked against the map


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value
