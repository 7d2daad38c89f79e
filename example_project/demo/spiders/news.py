import scrapy
from scrapy.http import HtmlResponse

from demo.items import ArticleItem


class NewsSpider(scrapy.Spider):
    """Crawls the demo site (``demo_site.py``): ``scrapy crawl news -a site=http://127.0.0.1:8000/``."""

    name = "news"

    def __init__(self, site: str = "http://127.0.0.1:8000/", **kwargs):
        super().__init__(**kwargs)
        self.site = site

    async def start(self):
        yield scrapy.Request(self.site)

    def parse(self, response):
        if not isinstance(response, HtmlResponse):
            return
        title = response.css("title::text").get()
        if title and response.url.rstrip("/") != self.site.rstrip("/") and "Demo site" not in title:
            words = len(" ".join(response.css("p::text").getall()).split())
            yield ArticleItem(url=response.url, title=title.strip(), words=words)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
