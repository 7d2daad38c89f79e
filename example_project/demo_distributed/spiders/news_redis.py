from demo.items import ArticleItem
from scrapy.http import HtmlResponse
from scrapy_redis.spiders import RedisSpider


class NewsRedisSpider(RedisSpider):
    """The demo site's crawl, fed from Redis: every process running it takes start URLs pushed to
    ``news_redis:start_urls`` and requests from the shared queue, and ends after ``MAX_IDLE_TIME_BEFORE_CLOSE``
    seconds without work."""

    name = "news_redis"
    redis_key = "news_redis:start_urls"

    def parse(self, response):
        if not isinstance(response, HtmlResponse):
            return
        title = response.css("title::text").get()
        if title and "Demo site" not in title and response.url.rstrip("/").count("/") > 2:
            words = len(" ".join(response.css("p::text").getall()).split())
            yield ArticleItem(url=response.url, title=title.strip(), words=words)
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
