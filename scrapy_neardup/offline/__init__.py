"""The offline side: the ``scrapy-neardup`` command over crawl dumps (JSONL, WARC), the batch run behind
``dedup``, and the evaluation on labelled pages."""
