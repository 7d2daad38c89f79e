"""The documentation names every setting (with its real default), stat, skip reason, meta key and CLI
option that the code has: a guard against the two drifting apart."""

from __future__ import annotations

import json
import os
import re

from helpers.crawlkit import ROOT

from scrapy_neardup.crawl.reporting import SKIP_REASONS
from scrapy_neardup.engine.algorithms import algorithm_names
from scrapy_neardup.offline.cli import build_parser
from scrapy_neardup.settings import SETTINGS


def read(name: str) -> str:
    with open(os.path.join(ROOT, "docs", name), encoding="utf-8") as f:
        return f.read()


def sections(text: str) -> dict[str, str]:
    """``### heading`` -> its text."""
    parts = re.split(r"^### (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def shown(value: object) -> list[str]:
    """How a default may be written in the docs."""
    if isinstance(value, str):
        return [json.dumps(value)]
    if isinstance(value, bool) or value is None:
        return [str(value)]
    if isinstance(value, float):
        return [str(value), f"{value:g}"]
    if isinstance(value, int) and value >= 1024 * 1024:
        return [str(value), f"{value:,}", f"{value // (1024 * 1024)} MiB", f"{value // (1024 * 1024)} MB"]
    return [str(value)]


def test_every_setting_is_documented_with_its_type_default_and_choices():
    documented = sections(read("reference.md"))
    types = {"bool": "bool", "int": "int", "float": "float", "str": "str", "file": "str"}
    for setting in SETTINGS:
        section = next((body for heading, body in documented.items() if setting.name in heading.split(" / ")), None)
        assert section is not None, f"{setting.name} has no section in docs/reference.md"
        head = section.split("\n\n")[0]
        assert f"`{types[setting.kind]}`" in head, (setting.name, setting.kind)
        assert ("or `None`" in head) == setting.optional, (setting.name, "None allowed?", setting.optional)
        assert "default" in head and any(f"`{s}`" in head or s in head for s in shown(setting.default)), (
            setting.name,
            setting.default,
        )
        for choice in setting.allowed_choices:
            assert f'`"{choice}"`' in section, (setting.name, choice)


def test_every_stat_skip_reason_and_algorithm_is_documented():
    reference = read("reference.md")
    code = ""
    for folder, _, files in os.walk(os.path.join(ROOT, "scrapy_neardup")):
        for file in files:
            if file.endswith(".py"):
                with open(os.path.join(folder, file), encoding="utf-8") as f:
                    code += f.read()
    stats = set(re.findall(r'"(neardup/[a-z_/]+[a-z_])"', code)) - {"neardup/skipped/"}
    assert stats, "no stat found in the code"
    for stat in stats:
        assert f"`{stat}`" in reference, f"stat {stat} is not in docs/reference.md"
    for reason in SKIP_REASONS:
        assert f"`{reason}`" in reference, f"skip reason {reason} is not in docs/reference.md"
    for algorithm in algorithm_names():
        assert f'`"{algorithm}"`' in reference, f"algorithm {algorithm} is not in docs/reference.md"
    for key in ("neardup_enabled", "neardup_key", "neardup"):
        assert f"| `{key}` |" in reference, f"meta key {key} is not in docs/reference.md"


def test_every_cli_option_is_documented():
    cli = read("cli.md")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in commands.items():
        assert f"## {name}" in cli, f"command {name} is not in docs/cli.md"
        for action in sub._actions:
            for option in action.option_strings:
                if option in ("-h", "--help"):
                    continue
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", cli), (
                    f"{name} {option} is not in docs/cli.md"
                )


def test_every_demo_site_command_in_the_docs_parses_and_the_labelled_set_evaluates(tmp_path):
    """Commands a user copies: every ``demo_site.py ...`` line of the README and docs/ is one the script
    takes; ``--labelled`` writes a set ``scrapy-neardup evaluate`` scores (the README's way to reproduce a
    quality figure without neardup-dev)."""
    import shlex

    from demo_site import build_parser as demo_parser
    from demo_site import write_labelled

    from scrapy_neardup.offline.evaluation import evaluate_configurations
    from scrapy_neardup.settings import Config

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        texts = [f.read()]
    texts += [read(name) for name in sorted(os.listdir(os.path.join(ROOT, "docs"))) if name.endswith(".md")]
    commands = [m.group(1) for text in texts for m in re.finditer(r"demo_site\.py([^\n&#]*)", text)]
    assert len(commands) >= 2
    for command in commands:
        args = [a for a in shlex.split(command.split("&&")[0]) if a]
        demo_parser().parse_args(args)  # exits (SystemExit) on an argument it does not take
    written = write_labelled(str(tmp_path / "set"))
    rows = evaluate_configurations(
        str(tmp_path / "set" / "manifest.jsonl"), [("minhash", Config.from_settings({}))], workers=0
    )
    assert written == 43 and rows[0]["f1"] == 1.0
