"""facet_tags: filter options are escaped (tag values come from skills and imported task.toml)."""
from facet_site.templatetags.facet_tags import options


def test_options_escape_values_and_labels_and_mark_the_chosen_ones():
    html = options(['x"><script>alert(1)</script>', ("a&b", "A & B"), (3, "#3 run")], [3, "a&b"])
    assert "<script>" not in html and "&quot;&gt;&lt;script&gt;" in html
    assert '<option value="a&amp;b" selected>A &amp; B</option>' in html
    assert '<option value="3" selected>#3 run</option>' in html
    assert options([], None) == ""
