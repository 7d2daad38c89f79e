"""The package's rooms, and the one direction its imports go: ``crawl`` and ``offline`` use ``assembly`` (which
wires what ``settings`` parses) and ``workers`` (the extraction runtime), which use ``engine`` and ``store``;
the engine and the stores import neither Scrapy nor the rooms above them, and the offline side does not import
the Scrapy side."""

from __future__ import annotations

import ast
import os

from helpers.crawlkit import ROOT

PACKAGE = os.path.join(ROOT, "scrapy_neardup")


def imports_of(path: str, module: str) -> set[str]:
    """Absolute names of every module ``path`` (the module ``module``) imports, at any depth of the file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found: set[str] = set()
    package = module.rsplit(".", 1)[0] if not path.endswith("__init__.py") else module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
    return found


def modules() -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


def test_imports_point_one_way():
    rules = {
        "scrapy_neardup.engine": (
            "scrapy",
            "twisted",
            "scrapy_neardup.crawl",
            "scrapy_neardup.offline",
            "scrapy_neardup.settings",
            "scrapy_neardup.assembly",
            "scrapy_neardup.workers",
        ),
        "scrapy_neardup.store": (
            "scrapy",
            "twisted",
            "scrapy_neardup.crawl",
            "scrapy_neardup.offline",
            "scrapy_neardup.settings",
            "scrapy_neardup.assembly",
            "scrapy_neardup.workers",
            "scrapy_neardup.engine",
        ),
        "scrapy_neardup.offline": ("scrapy", "twisted", "scrapy_neardup.crawl"),
        "scrapy_neardup.settings": (  # Scrapy's Settings is named for type checking only
            "scrapy_neardup.crawl",
            "scrapy_neardup.offline",
            "scrapy_neardup.assembly",
            "scrapy_neardup.workers",
        ),
        "scrapy_neardup.assembly": (
            "scrapy",
            "scrapy_neardup.crawl",
            "scrapy_neardup.offline",
            "scrapy_neardup.workers",
        ),
        "scrapy_neardup.workers": ("scrapy", "twisted", "scrapy_neardup.crawl", "scrapy_neardup.offline"),
    }
    checked = 0
    for module, path in modules().items():
        for room, forbidden in rules.items():
            if module == room or module.startswith(room + "."):
                checked += 1
                for name in imports_of(path, module):
                    assert not any(name == f or name.startswith(f + ".") for f in forbidden), (module, name)
    assert checked >= 30


def test_every_algorithm_module_registers_one_algorithm_of_its_name():
    from scrapy_neardup.engine.algorithms import algorithm_class, algorithm_names

    folder = os.path.join(PACKAGE, "engine", "algorithms")
    files = {f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f not in ("__init__.py", "base.py")}
    assert set(algorithm_names()) == files
    for name in files:
        assert algorithm_class(name).name == name


def test_only_the_spark_engine_imports_pyspark_and_its_executor_steps_do_not():
    """PySpark is an extra: nothing outside ``offline.spark`` imports it, and the steps the executors run
    (``offline.spark.tasks``) import nothing of Spark, so that they run and are tested without it."""
    importers = set()
    for module, path in modules().items():
        if any(name == "pyspark" or name.startswith("pyspark.") for name in imports_of(path, module)):
            importers.add(module)
    assert importers == {
        "scrapy_neardup.offline.spark",
        "scrapy_neardup.offline.spark.job",
        "scrapy_neardup.offline.spark.components",
    }


def test_the_crawls_stats_are_written_by_the_reporter_alone():
    """Every ``neardup/...`` counter of a crawl goes through :class:`~scrapy_neardup.crawl.reporting.Reporter`
    (``count``, ``set``, ``most``): one writer, whichever collaborator meets the event."""
    writers = []
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path.endswith(os.path.join("crawl", "reporting.py")):
                continue
            with open(path, encoding="utf-8") as f:
                for node in ast.walk(ast.parse(f.read())):
                    if isinstance(node, ast.Attribute) and node.attr in (
                        "inc_value",
                        "set_value",
                        "max_value",
                        "min_value",
                    ):
                        writers.append(f"{os.path.relpath(path, PACKAGE)}:{node.lineno}")
    assert writers == []
