"""The card's escaping, HTML tripwire, plot inliner and plot labels, on hostile values without a pipeline run."""

from __future__ import annotations

import markdown
import pytest

from cuvee.card.escape import CardMarkupError, code, text
from cuvee.card.html import render_html

HOSTILE = ['<script>alert(1)</script>', '[x](javascript:alert(1))', '![i](x.png)', 'a|b', 'x`<img src=x onerror=1>`',
           '<img src="&sol;etc&sol;passwd">', '&lt;b&gt;', 'back\\slash*star*', '$x^$']
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def rendered_text(md: str) -> str:
    """The text python-markdown shows for ``md`` (entities decoded), or AssertionError if it made any element."""
    html = markdown.markdown(md)
    assert html.startswith("<p>") and html.endswith("</p>") and html.count("<") == 2 + html.count("<code>") * 2, html
    import html as h

    return h.unescape(html[3:-4].replace("<code>", "").replace("</code>", ""))


@pytest.mark.parametrize("value", HOSTILE)
def test_text_shows_exactly_the_value(value):
    assert rendered_text(text(value)) == value


@pytest.mark.parametrize("value", HOSTILE)
def test_code_shows_exactly_the_value(value):
    assert rendered_text(code(value)) == value


def test_plain_names_stay_readable():
    assert text("exact_dedup") == "exact_dedup" and code("toy_quality_score") == "`toy_quality_score`"
    assert text("line\nbreak") == "line break" and len(text("x" * 10_000)) <= 300


def test_inliner_embeds_only_the_plots_it_is_given(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not publish")
    page = render_html("# t\n\n![funnel](card_images/funnel.png)\n", {"card_images/funnel.png": PNG}, "t")
    assert 'src="data:image/png;base64,' in page
    # an image the card did not write, even one naming a real file, is never read: the page is refused
    for md in (f'<img src="{str(secret).replace("/", "&sol;")}">', f"![x]({secret})", "![x](card_images/other.png)"):
        with pytest.raises(CardMarkupError):
            render_html(f"# t\n\n{md}\n", {"card_images/funnel.png": PNG}, "t")


def test_tripwire_refuses_markup_the_card_does_not_write():
    with pytest.raises(CardMarkupError, match="svg"):
        render_html("# t\n\n<svg onload=alert(1)>\n", {}, "t")


def test_plot_labels_with_dollars_do_not_stop_the_card(tmp_path):
    from cuvee.card import plots

    assert plots.language_plot({"$\\frac{$": 3, "$x^$": 2, "en": 5}, tmp_path / "l.png") is not None
    rows = [{"label": "01 $\\frac{$", "docs_in": 5, "docs_out": 3, "dropped": 2}]
    assert plots.funnel_plot(rows, tmp_path / "f.png") is not None
