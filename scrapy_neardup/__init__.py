"""scrapy-neardup: find near-duplicate pages while Scrapy crawls, and drop or tag them.

Algorithm modules (:mod:`scrapy_neardup.engine`) and stores (:mod:`scrapy_neardup.store`) know nothing of
Scrapy; the components exported here are thin layers over them.
"""

from ._config import Config, ConfigError
from ._middleware import NearDupDownloaderMiddleware
from ._pipeline import NearDupPipeline
from ._spidermiddleware import NearDupSpiderMiddleware
from ._version import __version__
from .addon import Addon

__all__ = [
    "Addon",
    "Config",
    "ConfigError",
    "NearDupDownloaderMiddleware",
    "NearDupPipeline",
    "NearDupSpiderMiddleware",
    "__version__",
]
