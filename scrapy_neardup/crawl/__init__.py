"""The Scrapy side: the add-on's three components, the per-crawler service they share, and the extraction
worker processes. The only package that imports Scrapy."""
