"""Every ``NEARDUP_*`` setting, parsed and validated in one place at start-up.

A bad value fails the crawl before it starts, with a message naming the setting, the value and what is
allowed. Components read :class:`Config`, never ``crawler.settings`` directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .engine.algorithms import algorithm_names
from .store import STORE_SCHEMES, redact_url

if TYPE_CHECKING:  # the engine (numpy) is imported when a setting needs it, not to print --version
    from collections.abc import Mapping

    from scrapy.settings import BaseSettings

    from .engine.algorithms.base import Algorithm
    from .engine.detector import Detector
    from .engine.prepare import DocumentPipeline
    from .engine.template import TemplateGuard
    from .store import Store, StoreMismatchError

    SettingsLike = BaseSettings | Mapping[str, Any]

ACTIONS = ("drop", "tag")
ON_STORE_ERROR = ("pass", "stop")
#: trafilatura's balance between extracting too little and too much (its favor_recall / favor_precision).
EXTRACT_FAVOR = ("recall", "balanced", "precision")
#: Which declared canonical pages a crawl fetches before the copy that declares them is decided: on the same
#: site (registrable domain) as the copy, on any site, or none (see scrapy_neardup.engine.canonical).
CANONICAL_FETCH = ("site", "all", "none")
#: (setting, default) for every setting; ``NEARDUP_ENABLED`` first, then alphabetical, as Scrapy orders them.
DEFAULTS: dict[str, Any] = {
    "NEARDUP_ENABLED": False,
    "NEARDUP_ACTION": "drop",
    "NEARDUP_ALGORITHM": "minhash",
    "NEARDUP_BODY_CACHE_SIZE": 10_000,
    "NEARDUP_CANONICAL": True,
    "NEARDUP_CANONICAL_FETCH": "site",
    "NEARDUP_DEBUG": False,
    "NEARDUP_EXPIRATION_SECS": 0,
    "NEARDUP_EXTRACT": True,
    "NEARDUP_EXTRACT_FAST": False,
    "NEARDUP_EXTRACT_FAVOR": "recall",
    "NEARDUP_IMATCH_LEXICON": None,
    "NEARDUP_ITEM_FIELD": None,
    "NEARDUP_MAX_BODY_SIZE": 2 * 1024 * 1024,
    "NEARDUP_MIN_TEXT_LENGTH": 200,
    "NEARDUP_MINHASH_NUM_PERM": 128,
    "NEARDUP_MINHASH_SEED": 1,
    "NEARDUP_MINHASH_SKETCH": "one-permutation",
    "NEARDUP_ON_STORE_ERROR": "pass",
    "NEARDUP_RECHECK_CHANGED": True,
    "NEARDUP_REDIS_KEY": "neardup:{%(spider)s}",
    "NEARDUP_REDIS_RETRIES": 3,
    "NEARDUP_REDIS_TIMEOUT_SECS": 5.0,
    "NEARDUP_REDIS_BUCKET_BINS": 262_144,
    "NEARDUP_REDIS_TLS_CA_FILE": None,
    "NEARDUP_REDIS_TLS_CERT_FILE": None,
    "NEARDUP_REDIS_TLS_KEY_FILE": None,
    "NEARDUP_RESET": False,
    "NEARDUP_SHINGLE_SIZE": None,
    "NEARDUP_SIMHASH_BLOCKS": None,
    "NEARDUP_SIMHASH_MAX_DISTANCE": None,
    "NEARDUP_STORE_COMMIT_EVERY": 500,
    "NEARDUP_STORE_COMMIT_SECS": 1.0,
    "NEARDUP_STORE_CLASS": None,
    "NEARDUP_STORE_URL": None,
    "NEARDUP_TEMPLATE_REPEATS": 2,
    "NEARDUP_THRESHOLD": None,
    "NEARDUP_WORKER_MAX_TASKS": 1000,
    "NEARDUP_WORKER_TIMEOUT": 60.0,
    "NEARDUP_WORKERS": None,
}


#: The setting behind each parameter a store records (what a mismatch message names).
PARAM_SETTINGS = {
    "algorithm": "NEARDUP_ALGORITHM",
    "num_perm": "NEARDUP_MINHASH_NUM_PERM",
    "k": "NEARDUP_MINHASH_NUM_PERM",
    "seed": "NEARDUP_MINHASH_SEED",
    "shingle_size": "NEARDUP_SHINGLE_SIZE",
    "sketch": "NEARDUP_MINHASH_SKETCH",
    "bands": "NEARDUP_THRESHOLD",
    "rows": "NEARDUP_THRESHOLD",
    "max_distance": "NEARDUP_THRESHOLD or NEARDUP_SIMHASH_MAX_DISTANCE",
    "blocks": "NEARDUP_SIMHASH_BLOCKS",
    "lexicon": "NEARDUP_IMATCH_LEXICON",
    "format_version": "the store format of this version",
}


def _name_settings(exc: StoreMismatchError) -> str:
    """A store mismatch message with the setting behind each differing parameter named."""
    from .store.base import mismatch_message

    named = [
        f"{d} ({PARAM_SETTINGS[d.split(':', 1)[0]]})" if d.split(":", 1)[0] in PARAM_SETTINGS else d
        for d in exc.differences
    ]
    return mismatch_message(exc.location, named)


class ConfigError(ValueError):
    """A ``NEARDUP_*`` setting has a value that is not allowed."""


def _fail(name: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{name} = {value!r} is not allowed: {allowed}")


def _redis_bucket_bins(settings: SettingsLike) -> int:
    """``NEARDUP_REDIS_BUCKET_BINS``: a power of two from 4,096 to 4,194,304 (64 groups of 64 to 65,536 bins)."""
    value = int(_int(settings, "NEARDUP_REDIS_BUCKET_BINS", 4_096, 4_194_304))  # type: ignore[arg-type]
    if value & (value - 1):
        raise _fail(
            "NEARDUP_REDIS_BUCKET_BINS",
            value,
            "a power of two from 4096 to 4194304 (about pages x LSH bands / 100 for the crawl's expected size)",
        )
    return value


def _get(settings: SettingsLike, name: str) -> Any:
    """A setting's value; the string ``"None"`` (any case), as ``-s NAME=None`` gives, is ``None``."""
    value = settings.get(name, DEFAULTS[name])
    if isinstance(value, str) and value.strip().lower() == "none":
        return None
    return value


def unknown_settings(settings: SettingsLike) -> list[str]:
    """One line for each ``NEARDUP_*`` name that is not a setting (a typo is otherwise silently ignored),
    with the closest real name when there is one."""
    import difflib

    lines = []
    for name in sorted(n for n in settings if isinstance(n, str) and n.startswith("NEARDUP_") and n not in DEFAULTS):
        close = difflib.get_close_matches(name, list(DEFAULTS), n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else "; see docs/reference.md for the settings"
        lines.append(f"{name} is not a scrapy-neardup setting and is ignored{hint}")
    return lines


def _bool(settings: SettingsLike, name: str) -> bool:
    value = settings.get(name, DEFAULTS[name])
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.strip().lower() in ("1", "true", "yes", "on")
    raise _fail(name, value, "use True or False")


def _int(settings: SettingsLike, name: str, low: int, high: int | None = None, optional: bool = False) -> int | None:
    value = _get(settings, name) if optional else settings.get(name, DEFAULTS[name])
    if value is None and optional:
        return None
    try:
        number = int(value)
        if isinstance(value, float) and value != number or isinstance(value, bool):
            raise ValueError
    except (TypeError, ValueError):
        number = None  # type: ignore[assignment]
    if number is None or number < low or (high is not None and number > high):
        span = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
        raise _fail(name, value, span + (" or None" if optional else ""))
    return number


def _float(
    settings: SettingsLike, name: str, low: float, high: float, optional: bool = False, open_low: bool = False
) -> float | None:
    value = _get(settings, name) if optional else settings.get(name, DEFAULTS[name])
    if value is None and optional:
        return None
    try:
        number = float(value)
        if isinstance(value, bool):
            raise ValueError
    except (TypeError, ValueError):
        number = None  # type: ignore[assignment]
    if number is None or number > high or number < low or (open_low and number == low):
        left = "(" if open_low else "["
        raise _fail(name, value, f"a number in {left}{low}, {high}]" + (" or None" if optional else ""))
    return number


def _choice(settings: SettingsLike, name: str, allowed: tuple[str, ...]) -> str:
    value = settings.get(name, DEFAULTS[name])
    if not isinstance(value, str) or value.strip().lower() not in allowed:
        raise _fail(name, value, "one of " + ", ".join(repr(a) for a in allowed))
    return value.strip().lower()


def _file(settings: SettingsLike, name: str) -> str | None:
    """An optional path of a file that must exist and be readable now (a TLS certificate or key)."""
    value = settings.get(name, DEFAULTS[name])
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not os.path.isfile(value) or not os.access(value, os.R_OK):
        raise _fail(name, value, "the path of a readable file, or None")
    return value


def _template_repeats(settings: SettingsLike) -> int:
    value = _int(settings, "NEARDUP_TEMPLATE_REPEATS", 0, 1_000_000)
    if value == 1:
        raise _fail("NEARDUP_TEMPLATE_REPEATS", value, "0 (guard off) or an integer of at least 2")
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class Config:
    enabled: bool = False
    action: str = "drop"
    algorithm: str = "minhash"
    body_cache_size: int = 10_000
    canonical: bool = True
    canonical_fetch: str = DEFAULTS["NEARDUP_CANONICAL_FETCH"]
    debug: bool = False
    expiration_secs: float = 0.0
    extract: bool = True
    extract_fast: bool = False
    extract_favor: str = "recall"
    imatch_lexicon: str | None = None
    item_field: str | None = None
    max_body_size: int = DEFAULTS["NEARDUP_MAX_BODY_SIZE"]
    min_text_length: int = 200
    minhash_num_perm: int = 128
    minhash_seed: int = 1
    minhash_sketch: str = "one-permutation"
    on_store_error: str = "pass"
    recheck_changed: bool = True
    redis_key: str = DEFAULTS["NEARDUP_REDIS_KEY"]
    redis_retries: int = 3
    redis_timeout_secs: float = 5.0
    redis_bucket_bins: int = 262_144
    redis_tls_ca_file: str | None = None
    redis_tls_cert_file: str | None = None
    redis_tls_key_file: str | None = None
    reset: bool = False
    shingle_size: int = 2
    simhash_blocks: int | None = None
    simhash_max_distance: int | None = None
    store_commit_every: int = 500
    store_commit_secs: float = 1.0
    store_url: str | None = None
    store_class: str | None = None
    template_repeats: int = 2
    threshold: float = 0.45
    worker_max_tasks: int = 1000
    worker_timeout: float | None = 60.0
    workers: int | None = None
    #: The index parameters of an existing store this configuration adopted (JSON of name -> value), when
    #: only the threshold differs from what the store was made with (:meth:`open_detector`).
    stored_index: str | None = None

    @classmethod
    def from_settings(cls, settings: SettingsLike) -> Config:
        """Parse and check every ``NEARDUP_*`` setting; raises :class:`ConfigError` naming the culprit."""
        from .engine.algorithms import algorithm_class
        from .engine.algorithms.base import SettingProblem

        algorithm = _choice(settings, "NEARDUP_ALGORITHM", algorithm_names())
        kind = algorithm_class(algorithm)
        threshold = _float(settings, "NEARDUP_THRESHOLD", 0.0, 1.0, optional=True, open_low=True)
        shingle_size = _int(settings, "NEARDUP_SHINGLE_SIZE", 1, 32, optional=True)
        try:
            kind.check_threshold(threshold)
        except SettingProblem as exc:
            raise ConfigError(str(exc)) from None
        store_url = _get(settings, "NEARDUP_STORE_URL")
        store_class = _get(settings, "NEARDUP_STORE_CLASS")
        if store_class is not None:
            from .store import load_store_class

            if not isinstance(store_class, str):
                raise _fail("NEARDUP_STORE_CLASS", store_class, "an import path such as 'package.module.Class'")
            try:
                load_store_class(store_class)
            except ValueError as exc:
                raise _fail(
                    "NEARDUP_STORE_CLASS",
                    store_class,
                    f"the import path of a subclass of scrapy_neardup.store.Store, or None ({exc})",
                ) from None
        elif store_url is not None:
            if not isinstance(store_url, str) or store_url.split(":", 1)[0].lower() not in STORE_SCHEMES:
                raise _fail(
                    "NEARDUP_STORE_URL",
                    redact_url(store_url) if isinstance(store_url, str) else store_url,
                    "a URL starting with " + ", ".join(f"{s}://" for s in STORE_SCHEMES) + " (or None for the default)",
                )
            if store_url.lower().startswith("sqlite") and not store_url.startswith("sqlite:///"):
                raise _fail(
                    "NEARDUP_STORE_URL", redact_url(store_url), "sqlite:///relative/path or sqlite:////absolute/path"
                )
        redis_key = settings.get("NEARDUP_REDIS_KEY", DEFAULTS["NEARDUP_REDIS_KEY"])
        try:
            if not isinstance(redis_key, str) or not redis_key:
                raise TypeError
            redis_key % {"spider": "x"}
        except (TypeError, KeyError, ValueError):
            raise _fail(
                "NEARDUP_REDIS_KEY", redis_key, "a non-empty key prefix; %(spider)s stands for the spider's name"
            ) from None
        lexicon = _get(settings, "NEARDUP_IMATCH_LEXICON")
        item_field = _get(settings, "NEARDUP_ITEM_FIELD")
        if item_field is not None and (not isinstance(item_field, str) or not item_field):
            raise _fail("NEARDUP_ITEM_FIELD", item_field, "the name of an item field holding text, or None")
        config = cls(
            enabled=_bool(settings, "NEARDUP_ENABLED"),
            action=_choice(settings, "NEARDUP_ACTION", ACTIONS),
            algorithm=algorithm,
            body_cache_size=_int(settings, "NEARDUP_BODY_CACHE_SIZE", 0, 10_000_000),  # type: ignore[arg-type]
            canonical=_bool(settings, "NEARDUP_CANONICAL"),
            canonical_fetch=_choice(settings, "NEARDUP_CANONICAL_FETCH", CANONICAL_FETCH),
            debug=_bool(settings, "NEARDUP_DEBUG"),
            expiration_secs=_float(settings, "NEARDUP_EXPIRATION_SECS", 0.0, 1e10),  # type: ignore[arg-type]
            extract=_bool(settings, "NEARDUP_EXTRACT"),
            extract_fast=_bool(settings, "NEARDUP_EXTRACT_FAST"),
            extract_favor=_choice(settings, "NEARDUP_EXTRACT_FAVOR", EXTRACT_FAVOR),
            imatch_lexicon=lexicon,
            item_field=item_field,
            max_body_size=_int(settings, "NEARDUP_MAX_BODY_SIZE", 1),  # type: ignore[arg-type]
            min_text_length=_int(settings, "NEARDUP_MIN_TEXT_LENGTH", 0),  # type: ignore[arg-type]
            minhash_num_perm=_int(settings, "NEARDUP_MINHASH_NUM_PERM", 2, 1024),  # type: ignore[arg-type]
            minhash_seed=_int(settings, "NEARDUP_MINHASH_SEED", 0, 2**32 - 1),  # type: ignore[arg-type]
            minhash_sketch=_get(settings, "NEARDUP_MINHASH_SKETCH"),
            on_store_error=_choice(settings, "NEARDUP_ON_STORE_ERROR", ON_STORE_ERROR),
            recheck_changed=_bool(settings, "NEARDUP_RECHECK_CHANGED"),
            redis_key=redis_key,
            redis_retries=_int(settings, "NEARDUP_REDIS_RETRIES", 0, 100),  # type: ignore[arg-type]
            redis_timeout_secs=_float(settings, "NEARDUP_REDIS_TIMEOUT_SECS", 0.0, 3600.0, open_low=True),  # type: ignore[arg-type]
            redis_bucket_bins=_redis_bucket_bins(settings),
            redis_tls_ca_file=_file(settings, "NEARDUP_REDIS_TLS_CA_FILE"),
            redis_tls_cert_file=_file(settings, "NEARDUP_REDIS_TLS_CERT_FILE"),
            redis_tls_key_file=_file(settings, "NEARDUP_REDIS_TLS_KEY_FILE"),
            reset=_bool(settings, "NEARDUP_RESET"),
            shingle_size=shingle_size or kind.DEFAULT_SHINGLE_SIZE,
            simhash_blocks=_int(settings, "NEARDUP_SIMHASH_BLOCKS", 2, 64, optional=True),
            simhash_max_distance=_int(settings, "NEARDUP_SIMHASH_MAX_DISTANCE", 0, 64, optional=True),
            store_commit_every=_int(settings, "NEARDUP_STORE_COMMIT_EVERY", 1),  # type: ignore[arg-type]
            store_commit_secs=_float(settings, "NEARDUP_STORE_COMMIT_SECS", 0.0, 3600.0),  # type: ignore[arg-type]
            store_url=store_url,
            store_class=store_class,
            template_repeats=_template_repeats(settings),
            threshold=threshold if threshold is not None else kind.DEFAULT_THRESHOLD,
            worker_max_tasks=_int(settings, "NEARDUP_WORKER_MAX_TASKS", 0),  # type: ignore[arg-type]
            worker_timeout=_float(settings, "NEARDUP_WORKER_TIMEOUT", 0.0, 86400.0, optional=True, open_low=True),
            workers=_int(settings, "NEARDUP_WORKERS", 0, 256, optional=True),
        )
        try:
            kind.check_settings(config)
        except SettingProblem as exc:
            raise ConfigError(str(exc)) from None
        return config

    def build_pipeline(self) -> DocumentPipeline:
        """The stateless document pipeline (extraction and fingerprinting) these settings describe; it
        reads page texts too when the template guard is on."""
        from .engine.prepare import DocumentPipeline

        return DocumentPipeline(
            self.build_algorithm(),
            use_main=self.extract,
            min_text_length=self.min_text_length,
            fast=self.extract_fast,
            favor=self.extract_favor,
            with_page_text=self.uses_template_guard,
            find_canonical=self.canonical,
        )

    @property
    def uses_template_guard(self) -> bool:
        return self.extract and self.template_repeats > 0

    def build_template_guard(self, algorithm: Algorithm | None = None) -> TemplateGuard | None:
        """The template guard (stateful: one per deciding process), or ``None`` when it is off.
        ``algorithm``: the one these settings already built, if the caller has it (saves building it again)."""
        if not self.uses_template_guard:
            return None
        from .engine.template import TemplateGuard

        return TemplateGuard(self.template_repeats, algorithm=algorithm or self.build_algorithm())

    def resolved_workers(self) -> int:
        """Extraction worker processes: ``NEARDUP_WORKERS``, or the machine's cores when it is None."""
        return self.workers if self.workers is not None else (os.cpu_count() or 1)

    def build_algorithm(self) -> Algorithm:
        algorithm = self._build_algorithm()
        if self.stored_index is None:
            return algorithm
        import json

        adopted = algorithm.with_index(json.loads(self.stored_index))
        if adopted is None:  # pragma: no cover - open_detector only records an index the algorithm accepts
            raise ConfigError(f"the stored index {self.stored_index} cannot serve {algorithm.name}")
        return adopted

    def open_detector(self, store: Store, reset: bool = False) -> tuple[Config, Detector, str]:
        """Open ``store`` for these settings: the configuration to go on with, the open detector, and a note
        (empty unless the store's index was adopted).

        A store made with another threshold keeps its signatures, which do not depend on the threshold;
        only its index (MinHash's LSH bands, SimHash's tables) was shaped for the old one. Such a store is
        opened as it is, verified at the new threshold, with candidates from its own index, and the note
        says what that index finds at the new threshold (``NEARDUP_RESET`` re-indexes, by forgetting every
        page). Anything else that differs cannot be converted and raises
        :class:`~scrapy_neardup.store.StoreMismatchError`, naming the settings.
        """
        import json

        from .store import StoreMismatchError

        algorithm = self.build_algorithm()
        detector = self.detector(algorithm, store)
        try:
            detector.open(reset=reset)
            return self, detector, ""
        except StoreMismatchError as exc:
            store.close()
            try:
                stored = {name: json.loads(value) for name, value in exc.stored.items()}
            except ValueError:
                stored = {}
            adopted = (
                algorithm.with_index({k: v for k, v in stored.items() if k != "format_version"})
                if (stored.get("format_version") == detector.meta()["format_version"])
                else None
            )
            if adopted is None:
                raise StoreMismatchError(_name_settings(exc), exc.location, exc.differences, exc.stored) from None
            location, differences = exc.location, exc.differences
        config = replace(self, stored_index=json.dumps(adopted.params(), sort_keys=True))
        detector = config.detector(config.build_algorithm(), store)
        detector.open()
        note = (
            f"the store at {location} was indexed for another threshold ({'; '.join(differences)}); "
            f"its fingerprints are kept and compared at threshold {self.threshold:g}: {adopted.index_note()}. "
            "NEARDUP_RESET = True would re-index it for this threshold, by forgetting every page"
        )
        return config, detector, note

    def detector(self, algorithm: Algorithm, store: Store) -> Detector:
        """A detector of ``algorithm`` over ``store`` (not opened) with these settings' rules for known
        keys: re-check changed content, and the age limit."""
        from .engine.detector import Detector

        return Detector(
            algorithm, store, recheck_changed=self.recheck_changed, max_age_secs=self.expiration_secs or None
        )

    def _build_algorithm(self) -> Algorithm:
        from .engine.algorithms import algorithm_class

        return algorithm_class(self.algorithm).from_settings(self)

    def build_store(self, spider_name: str, data_dir: str) -> Store:
        """The (not yet open) store of a spider: ``NEARDUP_STORE_URL`` or its default file, built by the
        backend of the URL's scheme or by ``NEARDUP_STORE_CLASS``, with the store settings, and the spider's
        Redis key prefix (``NEARDUP_REDIS_KEY``). The crawl and the CLI build stores here, and only here."""
        from .store import store_from_url

        return store_from_url(
            self.resolve_store_url(spider_name, data_dir),
            store_class=self.store_class,
            commit_every=self.store_commit_every,
            commit_secs=self.store_commit_secs,
            prefix=self.redis_key % {"spider": spider_name},
            retries=self.redis_retries,
            timeout_secs=self.redis_timeout_secs,
            bucket_bins=self.redis_bucket_bins,
            tls_ca_file=self.redis_tls_ca_file,
            tls_cert_file=self.redis_tls_cert_file,
            tls_key_file=self.redis_tls_key_file,
        )

    def resolve_store_url(self, spider_name: str, data_dir: str) -> str:
        """The configured store URL, or the default SQLite file ``<data_dir>/neardup/<spider>.sqlite3``."""
        if self.store_url:
            return self.store_url
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in spider_name) or "spider"
        return "sqlite:///" + os.path.join(data_dir, "neardup", safe + ".sqlite3")
