import scrapy


class ArticleItem(scrapy.Item):
    url = scrapy.Field()
    title = scrapy.Field()
    words = scrapy.Field()
    # Filled by scrapy-neardup in tag mode for pages that near-duplicate an earlier one.
    near_duplicate_of = scrapy.Field()
    near_duplicate_similarity = scrapy.Field()
