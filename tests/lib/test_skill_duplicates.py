"""The order in which duplicate resolution keeps a copy: safety, earliest publication (any version
in `_meta.json` history), downloads, stars, then the copy ingested first."""
from facet_site.lib.skill_duplicates import Copy, copy_from_provenance, decide, earliest_published_ms


def test_a_clean_copy_beats_a_suspicious_one_whatever_its_dates_and_usage():
    clean = Copy(id=2, safety="clean", published_ms=1_770_000_000_000, downloads=1, order=2)
    suspicious = Copy(id=1, safety="suspicious", published_ms=1_600_000_000_000, downloads=90_000, order=1)
    d = decide(suspicious, clean)
    assert (d.kept.id, d.dropped.id, d.rule) == (2, 1, "safety")
    assert d.reason == "#2 is clean and #1 is suspicious: a clean copy is kept first"


def test_the_earliest_published_copy_is_kept_even_when_ingested_later():
    clone = Copy(id=1, published_ms=1_769_000_000_000, downloads=500, order=1)
    original = Copy(id=2, published_ms=1_740_000_000_000, downloads=3, order=2)
    d = decide(clone, original)
    assert (d.kept.id, d.rule) == (2, "published")
    assert d.reason.startswith("#2 was published first (2025-02-19")


def test_a_known_date_beats_an_unknown_one():
    assert decide(Copy(id=1), Copy(id=2, published_ms=1_700_000_000_000)).kept.id == 2


def test_then_downloads_then_stars_then_the_first_ingested():
    assert decide(Copy(id=1, downloads=10), Copy(id=2, downloads=11)).rule == "downloads"
    assert decide(Copy(id=1, downloads=10), Copy(id=2, downloads=11)).kept.id == 2
    d = decide(Copy(id=1, stars=3), Copy(id=2, stars=1))
    assert (d.kept.id, d.rule, d.reason) == (1, "stars", "#1 has more stars (3 vs 1)")
    d = decide(Copy(id=5, order=5), Copy(id=3, order=3))
    assert (d.kept.id, d.rule) == (3, "ingested")


def test_the_earliest_publication_is_read_from_latest_and_history():
    prov = {"meta": {"latest": {"publishedAt": 1_769_000_000_000},
                     "history": [{"publishedAt": 1_750_000_000_000}, {"publishedAt": "2024-05-01T00:00:00Z"}, "junk"]}}
    assert earliest_published_ms(prov) == 1_714_521_600_000
    assert earliest_published_ms({}) is None
    c = copy_from_provenance(7, {"meta": {"stats": {"downloads": 42, "stars": True}}}, safety="suspicious")
    assert (c.id, c.safety, c.downloads, c.stars, c.order) == (7, "suspicious", 42, None, 7)
