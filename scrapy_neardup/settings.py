"""Every ``NEARDUP_*`` setting, once: its name, type, default, range and meaning (:data:`SETTINGS`), and the
:class:`Config` parsed from it at start-up.

A bad value fails the crawl before it starts, with one line naming the setting, the value and what is
allowed. Components read :class:`Config`, never ``crawler.settings`` directly. The table is the one place of
a setting's default and range: the parser, the CLI's options and choices, and the docs' check
(``tests/unit/test_docs.py``) read it. What the settings build (the algorithm, the pipeline, the store, the
detector) is wired in :mod:`scrapy_neardup.assembly`.

Nothing here imports Scrapy or numpy: ``scrapy-neardup --version`` and a bad setting stay quick.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .engine.algorithms import DEFAULT_ALGORITHM, MINHASH_SKETCH_NAMES, algorithm_names
from .engine.canonical import CANONICAL_FETCH_POLICIES
from .engine.extract import EXTRACTOR_NAMES, TRAFILATURA_FAVORS
from .engine.learned import AGREEMENT, LESSONS, MIN_CHECK_SHARE
from .store import STORE_SCHEMES, redact_url

if TYPE_CHECKING:
    from collections.abc import Mapping

    from scrapy.settings import BaseSettings

    SettingsLike = BaseSettings | Mapping[str, Any]


class ConfigError(ValueError):
    """A ``NEARDUP_*`` setting has a value that is not allowed."""


class Invalid(ValueError):
    """Raised by a setting's extra check: the message says what is allowed."""


def resolved_workers(workers: int | None) -> int:
    """How many extraction worker processes ``workers`` (``NEARDUP_WORKERS``, ``--workers``) means: itself, or
    the machine's cores when it is ``None``."""
    return workers if workers is not None else (os.cpu_count() or 1)


@dataclass(frozen=True)
class Setting:
    """One setting. ``kind``: ``bool``, ``int``, ``float``, ``str`` (a choice when ``choices`` is given) or
    ``file`` (the path of a readable file). ``optional``: ``None`` is allowed (``-s NAME=None`` gives it).
    ``low``/``high`` bound a number (``open_low``: the low end excluded). ``check`` tests what the kind
    accepted and raises :class:`Invalid` with what is allowed. ``shown``: how a bad value is printed (a
    store URL without its password)."""

    name: str
    kind: str
    default: Any
    help: str
    optional: bool = False
    low: int | float | None = None
    high: int | float | None = None
    open_low: bool = False
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    check: Callable[[Any], None] | None = None
    shown: Callable[[Any], Any] | None = None

    @property
    def field(self) -> str:
        """The :class:`Config` attribute holding it."""
        return self.name.removeprefix("NEARDUP_").lower()

    @property
    def allowed_choices(self) -> tuple[str, ...]:
        return self.choices() if callable(self.choices) else self.choices

    def parse(self, settings: SettingsLike) -> Any:
        """This setting's value in ``settings`` (its default when absent), checked; :class:`ConfigError`."""
        value = settings.get(self.name, self.default)
        if self.optional and (
            value is None
            or (isinstance(value, str) and value.strip().lower() == "none")
            or (self.kind == "file" and value == "")
        ):
            return None
        parsed = _KINDS[self.kind](self, value)
        if self.check is not None:
            try:
                self.check(parsed)
            except Invalid as exc:
                raise self.fail(value, str(exc)) from None
        return parsed

    def fail(self, value: Any, allowed: str) -> ConfigError:
        shown = self.shown(value) if self.shown is not None else value
        return ConfigError(f"{self.name} = {shown!r} is not allowed: {allowed}")

    def span(self) -> str:
        """What a number may be, in words."""
        if self.kind == "float":
            text = f"a number in {'(' if self.open_low else '['}{self.low}, {self.high}]"
        elif self.high is not None:
            text = f"an integer from {self.low} to {self.high}"
        else:
            text = f"an integer >= {self.low}"
        return text + (" or None" if self.optional else "")


def _as_bool(setting: Setting, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.strip().lower() in ("1", "true", "yes", "on")
    raise setting.fail(value, "use True or False")


def _as_int(setting: Setting, value: Any) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(value)
        if isinstance(value, float) and value != number:
            raise ValueError
    except (TypeError, ValueError):
        raise setting.fail(value, setting.span()) from None
    if (setting.low is not None and number < setting.low) or (setting.high is not None and number > setting.high):
        raise setting.fail(value, setting.span())
    return number


def _as_float(setting: Setting, value: Any) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise setting.fail(value, setting.span()) from None
    low, high = setting.low if setting.low is not None else float("-inf"), setting.high or float("inf")
    if not (low <= number <= high) or (setting.open_low and number == low):
        raise setting.fail(value, setting.span())
    return number


def _as_str(setting: Setting, value: Any) -> str:
    choices = setting.allowed_choices
    if choices:
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise setting.fail(value, "one of " + ", ".join(repr(c) for c in choices))
        return value.strip().lower()
    if not isinstance(value, str) or not value:
        raise setting.fail(value, "a non-empty string" + (" or None" if setting.optional else ""))
    return value


def _as_file(setting: Setting, value: Any) -> str:
    if not isinstance(value, str) or not os.path.isfile(value) or not os.access(value, os.R_OK):
        raise setting.fail(value, "the path of a readable file, or None")
    return value


_KINDS: dict[str, Callable[[Setting, Any], Any]] = {
    "bool": _as_bool,
    "int": _as_int,
    "float": _as_float,
    "str": _as_str,
    "file": _as_file,
}


def _power_of_two(value: int) -> None:
    if value & (value - 1):
        raise Invalid(
            "a power of two from 4096 to 4194304 (about pages x LSH bands / 100 for the crawl's expected size)"
        )


def _template_repeats(value: int) -> None:
    if value == 1:
        raise Invalid("0 (guard off) or an integer of at least 2")


def _redis_key(value: str) -> None:
    try:
        value % {"spider": "x"}
    except (TypeError, KeyError, ValueError):
        raise Invalid("a non-empty key prefix; %(spider)s stands for the spider's name") from None


def _dud_rule_file(path: str) -> None:
    from .engine.urlrules import read_dud_rules

    try:
        with open(path, encoding="utf-8") as f:
            read_dud_rules(f.read(), path)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise Invalid(f"a duplicate-url-discarder rule file (JSON list): {exc}") from None


def _store_url(value: str) -> None:
    if value.split(":", 1)[0].lower() not in STORE_SCHEMES:
        raise Invalid(
            "a URL starting with " + ", ".join(f"{s}://" for s in STORE_SCHEMES) + " (or None for the default)"
        )
    if value.lower().startswith("sqlite") and not value.startswith("sqlite:///"):
        raise Invalid("sqlite:///relative/path or sqlite:////absolute/path")


def _store_class(value: str) -> None:
    from .store import load_store_class

    try:
        load_store_class(value)
    except ValueError as exc:
        raise Invalid(f"the import path of a subclass of scrapy_neardup.store.Store, or None ({exc})") from None


def _extractor_installed(value: str) -> None:
    import importlib.util

    if value.startswith("resiliparse") and importlib.util.find_spec("resiliparse") is None:
        raise Invalid("Resiliparse is not installed: pip install 'scrapy-neardup[resiliparse]'")


def _shown_url(value: Any) -> Any:
    return redact_url(value) if isinstance(value, str) else value


#: Every setting: ``NEARDUP_ENABLED`` first, then as docs/reference.md groups them. Defaults of ``None`` that
#: depend on another setting (the threshold and shingle size on the algorithm, the workers on the machine)
#: are resolved by :meth:`Config.from_settings`; the help says how.
SETTINGS: tuple[Setting, ...] = (
    Setting("NEARDUP_ENABLED", "bool", False, "turns the plugin on"),
    Setting("NEARDUP_ACTION", "str", "drop", "what happens to a near-duplicate", choices=("drop", "tag")),
    Setting(
        "NEARDUP_ALGORITHM",
        "str",
        DEFAULT_ALGORITHM,
        "how pages are fingerprinted and compared",
        choices=algorithm_names,
    ),
    Setting("NEARDUP_BODY_CACHE_SIZE", "int", 10_000, "bodies of identical pages remembered", low=0, high=10_000_000),
    Setting("NEARDUP_CANONICAL", "bool", True, "weigh the canonical URL a page declares"),
    Setting(
        "NEARDUP_CANONICAL_FETCH",
        "str",
        "site",
        "which declared pages are fetched before their copy is decided",
        choices=CANONICAL_FETCH_POLICIES,
    ),
    Setting("NEARDUP_DEBUG", "bool", False, "log every near-duplicate and every skipped page"),
    Setting("NEARDUP_EXPIRATION_SECS", "float", 0.0, "forget pages older than this; 0: never", low=0.0, high=1e10),
    Setting("NEARDUP_EXTRACT", "bool", True, "fingerprint the main content, not the whole page text"),
    Setting(
        "NEARDUP_EXTRACTOR",
        "str",
        "trafilatura",
        "what finds a page's main content",
        choices=EXTRACTOR_NAMES,
        check=_extractor_installed,
    ),
    Setting("NEARDUP_EXTRACT_FAST", "bool", False, "trafilatura's fast mode (no fallback extractors)"),
    Setting(
        "NEARDUP_EXTRACT_FAVOR",
        "str",
        "recall",
        "what trafilatura favours when unsure: more text or less",
        choices=TRAFILATURA_FAVORS,
    ),
    Setting(
        "NEARDUP_GROUP_BUDGET",
        "int",
        0,
        "near-duplicates of each group let through, tagged, before drop applies; 0: none",
        low=0,
        high=1_000_000,
    ),
    Setting("NEARDUP_IMATCH_LEXICON", "str", None, "the I-Match lexicon file", optional=True),
    Setting("NEARDUP_ITEM_FIELD", "str", None, "check this item field's text instead of pages", optional=True),
    Setting(
        "NEARDUP_LEARN_AGREEMENT",
        "float",
        AGREEMENT,
        "word-pair Jaccard a learned template's text must reach against trafilatura's (below it: retired)",
        low=0.5,
        high=1.0,
    ),
    Setting(
        "NEARDUP_LEARN_CHECK_SHARE",
        "float",
        MIN_CHECK_SHARE,
        "least share of a learned template's pages also extracted by trafilatura to check it",
        low=0.0,
        high=1.0,
    ),
    Setting(
        "NEARDUP_LEARN_LESSONS",
        "int",
        LESSONS,
        "pages of a template that must agree before its selector is used",
        low=1,
        high=1000,
    ),
    Setting(
        "NEARDUP_LEARN_TEMPLATES",
        "bool",
        True,
        "learn each template's main content from trafilatura and replay it with lexbor",
    ),
    Setting("NEARDUP_MAX_BODY_SIZE", "int", 2 * 1024 * 1024, "larger responses pass unchecked (bytes)", low=1),
    Setting("NEARDUP_MIN_TEXT_LENGTH", "int", 200, "shortest text fingerprinted (characters)", low=0),
    Setting("NEARDUP_MINHASH_NUM_PERM", "int", 128, "MinHash permutations", low=2, high=1024),
    Setting("NEARDUP_MINHASH_SEED", "int", 1, "seed of the MinHash permutations", low=0, high=2**32 - 1),
    Setting(
        "NEARDUP_MINHASH_SKETCH",
        "str",
        "one-permutation",
        "how MinHash draws its minima",
        choices=MINHASH_SKETCH_NAMES,
    ),
    Setting(
        "NEARDUP_ON_STORE_ERROR", "str", "pass", "what a crawl does when the store fails", choices=("pass", "stop")
    ),
    Setting("NEARDUP_RECHECK_CHANGED", "bool", True, "re-check a known page whose content changed"),
    Setting("NEARDUP_REDIS_KEY", "str", "neardup:{%(spider)s}", "prefix of a spider's Redis keys", check=_redis_key),
    Setting(
        "NEARDUP_REDIS_BUCKET_BINS",
        "int",
        262_144,
        "strings holding a Redis store's LSH buckets",
        low=4_096,
        high=4_194_304,
        check=_power_of_two,
    ),
    Setting("NEARDUP_REDIS_RETRIES", "int", 3, "retries of a Redis call after a passing fault", low=0, high=100),
    Setting(
        "NEARDUP_REDIS_START_WAIT_SECS",
        "float",
        15.0,
        "seconds a crawl's start waits for a Redis server that does not answer",
        low=0.0,
        high=3600.0,
    ),
    Setting(
        "NEARDUP_REDIS_TIMEOUT_SECS",
        "float",
        5.0,
        "Redis connect and read timeout",
        low=0.0,
        high=3600.0,
        open_low=True,
    ),
    Setting("NEARDUP_REDIS_TLS_CA_FILE", "file", None, "PEM file of the Redis server's CA", optional=True),
    Setting("NEARDUP_REDIS_TLS_CERT_FILE", "file", None, "PEM file of the client certificate", optional=True),
    Setting("NEARDUP_REDIS_TLS_KEY_FILE", "file", None, "PEM file of the client key", optional=True),
    Setting("NEARDUP_RESET", "bool", False, "empty the store when the spider opens"),
    Setting(
        "NEARDUP_SHINGLE_SIZE", "int", None, "words per shingle (None: the algorithm's)", optional=True, low=1, high=32
    ),
    Setting("NEARDUP_SIMHASH_BLOCKS", "int", None, "SimHash table blocks", optional=True, low=2, high=64),
    Setting("NEARDUP_SIMHASH_MAX_DISTANCE", "int", None, "SimHash Hamming distance", optional=True, low=0, high=64),
    Setting("NEARDUP_SOFT404", "bool", True, "probe each host for its soft-404 page and recognise its copies"),
    Setting("NEARDUP_STORE_CLASS", "str", None, "a store backend of your own", optional=True, check=_store_class),
    Setting("NEARDUP_STORE_COMMIT_EVERY", "int", 500, "SQLite commits after this many pages", low=1),
    Setting("NEARDUP_STORE_COMMIT_SECS", "float", 1.0, "or after this many seconds", low=0.0, high=3600.0),
    Setting("NEARDUP_STORE_URL", "str", None, "where the store is", optional=True, shown=_shown_url),
    Setting(
        "NEARDUP_TEMPLATE_REPEATS",
        "int",
        2,
        "pages of one host sharing a main text before it is taken for a template; 0: off",
        low=0,
        high=1_000_000,
        check=_template_repeats,
    ),
    Setting(
        "NEARDUP_THRESHOLD",
        "float",
        None,
        "similarity of a near-duplicate (None: the algorithm's)",
        optional=True,
        low=0.0,
        high=1.0,
        open_low=True,
    ),
    Setting(
        "NEARDUP_URL_RULES",
        "str",
        "skip",
        "URL rules learned from the verdicts: off, learned only, or used to skip or deprioritize requests",
        choices=("off", "learn", "skip", "deprioritize"),
    ),
    Setting(
        "NEARDUP_URL_RULES_CONFIDENCE",
        "float",
        0.9,
        "estimated success rate a URL rule needs before it is used",
        low=0.5,
        high=1.0,
        open_low=True,
    ),
    Setting(
        "NEARDUP_URL_RULES_EXPLORE",
        "float",
        0.02,
        "share of a held rule's predicted duplicates fetched anyway, to keep checking it (more while it is young)",
        low=0.0,
        high=1.0,
    ),
    Setting(
        "NEARDUP_URL_RULES_FILE",
        "file",
        None,
        "hand-written URL rules: a duplicate-url-discarder rule file, used from the first page",
        optional=True,
        check=_dud_rule_file,
    ),
    Setting(
        "NEARDUP_URL_RULES_MIN_SUPPORT", "int", 8, "successful trials before a URL rule is used", low=1, high=1_000_000
    ),
    Setting(
        "NEARDUP_URL_RULES_PRIOR_HOSTS",
        "int",
        2,
        "other hosts where a rule must be confident before it lends them a prior on a new host; 0: no prior",
        low=0,
        high=1_000_000,
    ),
    Setting(
        "NEARDUP_URL_RULES_PRIOR_SUPPORT",
        "int",
        3,
        "successful trials on a new host before a rule with a prior is used there",
        low=1,
        high=1_000_000,
    ),
    Setting("NEARDUP_WORKER_MAX_TASKS", "int", 1000, "pages per worker process before it is renewed; 0: never", low=0),
    Setting(
        "NEARDUP_WORKER_NICE",
        "int",
        0,
        "how much lower than the crawler's the extraction workers' CPU priority is (POSIX niceness); 0: the same",
        low=0,
        high=19,
    ),
    Setting(
        "NEARDUP_WORKER_TIMEOUT",
        "float",
        60.0,
        "seconds a page's extraction may take",
        optional=True,
        low=0.0,
        high=86400.0,
        open_low=True,
    ),
    Setting(
        "NEARDUP_WORKERS", "int", None, "extraction worker processes (None: the cores)", optional=True, low=0, high=256
    ),
)

#: Each setting by name.
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def default_of(name: str) -> Any:
    """A setting's default, from the table."""
    return BY_NAME[name].default


def unknown_settings(settings: SettingsLike) -> list[str]:
    """One line for each ``NEARDUP_*`` name that is not a setting (a typo is otherwise silently ignored),
    with the closest real name when there is one."""
    import difflib

    lines = []
    for name in sorted(n for n in settings if isinstance(n, str) and n.startswith("NEARDUP_") and n not in BY_NAME):
        close = difflib.get_close_matches(name, list(BY_NAME), n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else "; see docs/reference.md for the settings"
        lines.append(f"{name} is not a scrapy-neardup setting and is ignored{hint}")
    return lines


@dataclass(frozen=True)
class Config:
    """The parsed settings (one attribute a setting, :attr:`Setting.field`), made by :meth:`from_settings`;
    the defaults are the table's (``Config.from_settings({})``)."""

    enabled: bool
    action: str
    algorithm: str
    body_cache_size: int
    canonical: bool
    canonical_fetch: str
    debug: bool
    expiration_secs: float
    extract: bool
    extractor: str
    extract_fast: bool
    extract_favor: str
    group_budget: int
    imatch_lexicon: str | None
    item_field: str | None
    learn_agreement: float
    learn_check_share: float
    learn_lessons: int
    learn_templates: bool
    max_body_size: int
    min_text_length: int
    minhash_num_perm: int
    minhash_seed: int
    minhash_sketch: str
    on_store_error: str
    recheck_changed: bool
    redis_key: str
    redis_bucket_bins: int
    redis_retries: int
    redis_start_wait_secs: float
    redis_timeout_secs: float
    redis_tls_ca_file: str | None
    redis_tls_cert_file: str | None
    redis_tls_key_file: str | None
    reset: bool
    #: Resolved: the algorithm's own when the setting is None.
    shingle_size: int
    simhash_blocks: int | None
    simhash_max_distance: int | None
    soft404: bool
    store_class: str | None
    store_commit_every: int
    store_commit_secs: float
    store_url: str | None
    template_repeats: int
    #: Resolved: the algorithm's own when the setting is None.
    threshold: float
    url_rules: str
    url_rules_confidence: float
    url_rules_explore: float
    url_rules_file: str | None
    url_rules_min_support: int
    url_rules_prior_hosts: int
    url_rules_prior_support: int
    worker_max_tasks: int
    worker_nice: int
    worker_timeout: float | None
    workers: int | None
    #: The index parameters of an existing store this configuration adopted (JSON of name -> value), when
    #: only the threshold differs from what the store was made with (:func:`~scrapy_neardup.assembly.open_detector`).
    stored_index: str | None = None

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> Config:
        """Parse and check every ``NEARDUP_*`` setting; raises :class:`ConfigError` naming the culprit."""
        from .engine.algorithms import algorithm_class
        from .engine.algorithms.base import SettingProblem

        values = {s.field: s.parse(settings) for s in SETTINGS}
        if values["store_class"] is None and values["store_url"] is not None:  # a class of one's own takes any URL
            try:
                _store_url(values["store_url"])
            except Invalid as exc:
                raise BY_NAME["NEARDUP_STORE_URL"].fail(values["store_url"], str(exc)) from None
        kind = algorithm_class(values["algorithm"])
        try:
            kind.check_threshold(values["threshold"])
        except SettingProblem as exc:
            raise ConfigError(str(exc)) from None
        if values["threshold"] is None:
            values["threshold"] = kind.DEFAULT_THRESHOLD
        if values["shingle_size"] is None:
            values["shingle_size"] = kind.DEFAULT_SHINGLE_SIZE
        config = cls(**values)
        try:
            kind.check_settings(config)
        except SettingProblem as exc:
            raise ConfigError(str(exc)) from None
        return config

    @property
    def learns_templates(self) -> bool:
        """Templates are learned only where trafilatura finds the main content: what a selector reproduces."""
        return self.extract and self.learn_templates and self.extractor == "trafilatura"

    @property
    def uses_template_guard(self) -> bool:
        return self.extract and self.template_repeats > 0

    def resolved_workers(self) -> int:
        """Extraction worker processes: ``NEARDUP_WORKERS``, or the machine's cores when it is None."""
        return resolved_workers(self.workers)

    def resolve_store_url(self, spider_name: str, data_dir: str) -> str:
        """The configured store URL, or the default SQLite file ``<data_dir>/neardup/<spider>.sqlite3``."""
        if self.store_url:
            return self.store_url
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in spider_name) or "spider"
        return "sqlite:///" + os.path.join(data_dir, "neardup", safe + ".sqlite3")
