"""``scrapy-neardup dedup --engine spark``: the batch engine on Apache Spark, for archives beyond one machine.

The work splits as the literature's recipe for web-scale near-duplicate detection does (Broder et al. 1997;
*Mining of Massive Datasets*, ch. 3; the BigCode deduplication of The Stack): the executors read the dumps and
prepare every document with the crawl's own pipeline (:mod:`.tasks`: extraction, shingles, fingerprint),
each document's LSH bucket keys are grouped by key, candidate pairs are verified on their signatures at the
same threshold, and the verified pairs' connected components are found in the DataFrame API by large-star /
small-star iterations (Kiveris et al., SoCC 2014; :mod:`.components`).

A component holds every page whose decision could depend on another's, so each component is then decided
by the engine's own decision loop (:class:`~scrapy_neardup.engine.decisions.DecisionLoop`), its members in
input order, as the local CLI decides them: the same groups, canonicals (best copy, declared canonicals)
and outputs, with the work spread over components instead of one process.

PySpark is an extra (``pip install scrapy-neardup[spark]``), imported by :mod:`.job` and :mod:`.components`
only; :mod:`.tasks` runs in the executors' Python workers and imports nothing of Spark.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess


class SparkUnavailable(RuntimeError):
    """PySpark or the Java it needs is missing: one line saying what to install."""


#: Spark 4 runs on Java 17 and later.
JAVA_NEEDED = 17


def java_version(java: str) -> int | None:
    """The major version of the ``java`` at that path (``17`` for ``openjdk version "17.0.15"``, ``8`` for
    ``"1.8.0_392"``), or ``None`` when it does not run."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def check_spark() -> None:
    """Refuse, before any work, a machine without PySpark or without a Java that Spark runs on."""
    try:
        import pyspark
    except ImportError:
        raise SparkUnavailable(
            "--engine spark needs PySpark: pip install 'scrapy-neardup[spark]' (and Java 17 or later)"
        ) from None
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise SparkUnavailable(
            f"--engine spark needs Java {JAVA_NEEDED} or later (PySpark {pyspark.__version__} runs on a JVM): "
            "none found on PATH or in JAVA_HOME; install one (Debian: apt-get install openjdk-17-jre-headless)"
        )
    version = java_version(java)
    major = int(pyspark.__version__.split(".")[0])
    if version is None or (major >= 4 and version < JAVA_NEEDED):
        raise SparkUnavailable(
            f"--engine spark: PySpark {pyspark.__version__} needs Java {JAVA_NEEDED} or later; {java} is "
            f"{'not runnable' if version is None else f'Java {version}'}: point JAVA_HOME at a newer one"
        )
