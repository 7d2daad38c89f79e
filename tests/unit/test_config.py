import pytest
from scrapy.settings import Settings

from scrapy_neardup import Config, ConfigError
from scrapy_neardup.assembly import build_algorithm, build_pipeline, build_store


def config(**values):
    return Config.from_settings(Settings({f"NEARDUP_{k}": v for k, v in values.items()}))


def test_defaults():
    c = config()
    assert (c.enabled, c.algorithm, c.action, c.threshold, c.shingle_size) == (False, "minhash", "drop", 0.45, 2)
    assert not c.extract_fast
    assert c.extract_favor == "recall" and build_pipeline(c).favor == "recall"
    assert build_pipeline(config(EXTRACT_FAVOR="precision")).favor == "precision"
    assert build_algorithm(c).params()["num_perm"] == 128
    assert build_algorithm(c).params()["sketch"] == "one-permutation"
    # The older sketch records exactly what stores made before the setting recorded, so they still open.
    assert "sketch" not in build_algorithm(config(MINHASH_SKETCH="permutations")).params()
    s = config(ALGORITHM="simhash")
    assert s.threshold == 0.9 and build_algorithm(s).max_distance == 6 and s.shingle_size == 2


def test_values_from_the_command_line_are_strings():
    c = config(ENABLED="true", THRESHOLD="0.7", MINHASH_NUM_PERM="64", ACTION="TAG", RESET="0")
    assert c.enabled and c.threshold == 0.7 and c.minhash_num_perm == 64 and c.action == "tag" and not c.reset
    # -s NAME=None means None, as documented for the settings that take it.
    n = config(THRESHOLD="None", SHINGLE_SIZE="none", STORE_URL="None", WORKERS="None", WORKER_TIMEOUT="None")
    assert (n.threshold, n.shingle_size, n.store_url, n.workers, n.worker_timeout) == (0.45, 2, None, None, None)


def test_misspelt_settings_are_named_with_the_closest_real_one():
    from scrapy_neardup.settings import unknown_settings

    lines = unknown_settings(Settings({"NEARDUP_TRESHOLD": 0.5, "NEARDUP_WHATEVER": 1, "NEARDUP_THRESHOLD": 0.5}))
    assert lines == [
        "NEARDUP_TRESHOLD is not a scrapy-neardup setting and is ignored; did you mean NEARDUP_THRESHOLD?",
        "NEARDUP_WHATEVER is not a scrapy-neardup setting and is ignored; see docs/reference.md for the settings",
    ]


@pytest.mark.parametrize(
    "name,value,message",
    [
        (
            "ALGORITHM",
            "lsh",
            "NEARDUP_ALGORITHM = 'lsh' is not allowed: one of 'minhash', 'bottomk', 'exact', "
            "'imatch', 'simhash', 'spotsigs', 'supershingle'",
        ),
        ("ACTION", "delete", "NEARDUP_ACTION = 'delete' is not allowed: one of 'drop', 'tag'"),
        (
            "EXTRACT_FAVOR",
            "speed",
            "NEARDUP_EXTRACT_FAVOR = 'speed' is not allowed: one of 'recall', 'balanced', 'precision'",
        ),
        ("THRESHOLD", 1.5, "NEARDUP_THRESHOLD = 1.5 is not allowed: a number in (0.0, 1.0]"),
        ("THRESHOLD", 0, "NEARDUP_THRESHOLD = 0 is not allowed"),
        ("THRESHOLD", "high", "NEARDUP_THRESHOLD = 'high'"),
        ("MINHASH_NUM_PERM", 1, "NEARDUP_MINHASH_NUM_PERM = 1 is not allowed: an integer from 2 to 1024"),
        ("MINHASH_NUM_PERM", 12.5, "NEARDUP_MINHASH_NUM_PERM = 12.5"),
        ("SHINGLE_SIZE", 0, "NEARDUP_SHINGLE_SIZE = 0 is not allowed: an integer from 1 to 32 or None"),
        ("ENABLED", "maybe", "NEARDUP_ENABLED = 'maybe' is not allowed: use True or False"),
        ("STORE_URL", "mongodb://x", "NEARDUP_STORE_URL = 'mongodb://x' is not allowed: a URL starting with memory://"),
        ("STORE_URL", "sqlite://x.db", "sqlite:///relative/path or sqlite:////absolute/path"),
        ("MIN_TEXT_LENGTH", -1, "NEARDUP_MIN_TEXT_LENGTH = -1"),
        ("ITEM_FIELD", "", "NEARDUP_ITEM_FIELD = ''"),
        ("REDIS_BUCKET_BINS", 100_000, "NEARDUP_REDIS_BUCKET_BINS = 100000 is not allowed: a power of two from 4096"),
        ("REDIS_BUCKET_BINS", 1024, "NEARDUP_REDIS_BUCKET_BINS = 1024 is not allowed: an integer from 4096 to 4194304"),
        (
            "MINHASH_SKETCH",
            "oph",
            "NEARDUP_MINHASH_SKETCH = 'oph' is not allowed: one of 'one-permutation', 'permutations'",
        ),
    ],
)
def test_bad_values_name_the_setting_and_the_allowed_values(name, value, message):
    with pytest.raises(ConfigError) as info:
        config(**{name: value})
    assert message in str(info.value)


def test_combinations_are_checked():
    with pytest.raises(ConfigError, match="NEARDUP_SIMHASH_BLOCKS = 3 .*more blocks than the Hamming distance"):
        config(ALGORITHM="simhash", SIMHASH_MAX_DISTANCE=3, SIMHASH_BLOCKS=3)
    with pytest.raises(ConfigError, match=r"NEARDUP_THRESHOLD = 1.0 .*\(0, 1\) for NEARDUP_ALGORITHM = 'minhash'"):
        config(THRESHOLD=1.0)
    assert build_algorithm(config(ALGORITHM="simhash", THRESHOLD=1.0)).max_distance == 0
    with pytest.raises(ConfigError, match=r"NEARDUP_THRESHOLD = 1.0 .*\(0, 1\) for NEARDUP_ALGORITHM = 'spotsigs'"):
        config(ALGORITHM="spotsigs", THRESHOLD=1.0)
    # A threshold SimHash's 64 bits cannot serve is refused with the reason and the range it serves.
    with pytest.raises(
        ConfigError,
        match=r"NEARDUP_THRESHOLD = 0.45 is not allowed: a number in \[0.55, 1.0\] "
        r"for NEARDUP_ALGORITHM = 'simhash': 0.45 would search 18 of its 64 bits, "
        r"too few .* use 'minhash' for lower thresholds",
    ):
        config(ALGORITHM="simhash", THRESHOLD=0.45)
    assert build_algorithm(config(ALGORITHM="simhash", THRESHOLD=0.55)).max_distance == 15
    with pytest.raises(ConfigError, match=r"NEARDUP_SIMHASH_MAX_DISTANCE = 16 is not allowed: an integer from 0 to 15"):
        config(ALGORITHM="simhash", SIMHASH_MAX_DISTANCE=16)


def test_simhash_threshold_maps_to_hamming_distance():
    assert build_algorithm(config(ALGORITHM="simhash", THRESHOLD=0.9)).max_distance == 6
    explicit = build_algorithm(config(ALGORITHM="simhash", SIMHASH_MAX_DISTANCE=4))
    assert explicit.max_distance == 4 and explicit.threshold == pytest.approx(0.9623, abs=1e-4)
    # The threshold is a Jaccard similarity: 0.9 searches the distances whose Jaccard estimate is >= 0.9.
    from scrapy_neardup.engine.algorithms.simhash import simhash_distance_for, simhash_jaccard

    for t in (0.55, 0.6, 0.7, 0.8, 0.9, 0.97, 1.0):
        d = simhash_distance_for(t)
        assert simhash_jaccard(d) >= t > simhash_jaccard(d + 1)


def test_default_store_is_one_sqlite_file_per_spider(tmp_path):
    url = config().resolve_store_url("my spider/1", str(tmp_path))
    assert url == f"sqlite:///{tmp_path}/neardup/my_spider_1.sqlite3"
    assert config(STORE_URL="memory://").resolve_store_url("x", "/d") == "memory://"


def test_every_algorithm_comes_from_the_registry_with_its_own_defaults():
    from dataclasses import fields

    from scrapy_neardup.engine.algorithms import algorithm_class, algorithm_names
    from scrapy_neardup.settings import Config

    names = algorithm_names()
    assert names[0] == "minhash" and len(names) == 7
    for name in names:
        kind = algorithm_class(name)
        assert kind.name == name
        settings = {"ALGORITHM": name}
        if name == "imatch":
            continue  # needs a lexicon file; built in test_literature and test_cli
        built = config(**settings)
        assert built.threshold == kind.DEFAULT_THRESHOLD and built.shingle_size == kind.DEFAULT_SHINGLE_SIZE
        assert type(build_algorithm(built)) is kind
    with pytest.raises(KeyError):
        algorithm_class("base")
    # One set of defaults: the settings table's. Config has a field a setting and no default of its own.
    from dataclasses import MISSING

    from scrapy_neardup.settings import SETTINGS

    settings_fields = {f.name: f for f in fields(Config) if f.name != "stored_index"}
    assert set(settings_fields) == {s.field for s in SETTINGS}
    assert all(f.default is MISSING for f in settings_fields.values())
    parsed = Config.from_settings({})
    for setting in SETTINGS:
        if setting.default is not None:
            assert getattr(parsed, setting.field) == setting.default, setting.name


class _CountingStore:
    """Stands for a user's own backend in NEARDUP_STORE_CLASS (a MemoryStore underneath)."""


def test_a_store_backend_of_ones_own_is_named_by_neardup_store_class(tmp_path):
    from scrapy_neardup.store import MemoryStore

    built = config(STORE_CLASS="scrapy_neardup.store.memory.MemoryStore", STORE_URL="custom://anything")
    store = build_store(built, "news", str(tmp_path))
    assert type(store) is MemoryStore  # built by the class named, whatever the URL's scheme
    with pytest.raises(
        ConfigError,
        match=r"NEARDUP_STORE_CLASS = 'test_config._CountingStore' is not allowed: "
        r"the import path of a subclass of scrapy_neardup.store.Store",
    ):
        config(STORE_CLASS="test_config._CountingStore")
    with pytest.raises(ConfigError, match=r"NEARDUP_STORE_CLASS = 'no.such.Module' is not allowed.*cannot import"):
        config(STORE_CLASS="no.such.Module")
    with pytest.raises(ConfigError, match=r"NEARDUP_STORE_URL = 'custom://anything' is not allowed"):
        config(STORE_URL="custom://anything")


def test_the_extractor_is_a_setting_and_the_store_refuses_another_ones_fingerprints(tmp_path):
    from scrapy_neardup.assembly import open_detector
    from scrapy_neardup.store import SqliteStore, StoreMismatchError

    assert config().extractor == "trafilatura"
    with pytest.raises(ConfigError, match="NEARDUP_EXTRACTOR = 'boilerpipe' is not allowed: one of 'trafilatura'"):
        config(EXTRACTOR="boilerpipe")
    path = str(tmp_path / "store.sqlite3")
    made = config(EXTRACTOR="resiliparse")
    _, detector, _ = open_detector(made, SqliteStore(path))
    assert detector.meta()["extractor"] == "resiliparse"
    detector.close()
    for other in ("trafilatura", "resiliparse-blocks"):
        with pytest.raises(StoreMismatchError, match="NEARDUP_EXTRACTOR"):
            open_detector(config(EXTRACTOR=other), SqliteStore(path))
    # Another threshold with the same extractor keeps the store (its index adopted), as for trafilatura.
    adopted, detector, note = open_detector(config(EXTRACTOR="resiliparse", THRESHOLD=0.6), SqliteStore(path))
    assert note and adopted.stored_index is not None
    detector.close()
    # A trafilatura store (no extractor recorded) refuses resiliparse fingerprints.
    plain = str(tmp_path / "plain.sqlite3")
    open_detector(config(), SqliteStore(plain))[1].close()
    with pytest.raises(StoreMismatchError, match="NEARDUP_EXTRACTOR"):
        open_detector(config(EXTRACTOR="resiliparse-blocks"), SqliteStore(plain))
