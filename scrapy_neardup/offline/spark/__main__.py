"""``spark-submit`` entry point: the arguments of ``scrapy-neardup dedup``, run on the session spark-submit
started (its ``--master`` and ``--conf`` stand)::

    spark-submit --master yarn "$(python -c 'import scrapy_neardup.offline.spark.__main__ as m; print(m.__file__)')" \\
        s3a://bucket/crawl/*.warc.gz -o pairs.tsv --clusters clusters.jsonl --parquet s3a://bucket/dedup/
"""

import sys

from scrapy_neardup.offline.cli import main

if __name__ == "__main__":
    sys.exit(main(["dedup", "--engine", "spark", *sys.argv[1:]]))
