"""Safe rendering of untrusted text (skill bodies, model output) for reviewers' browsers."""
from __future__ import annotations

from html import escape

import nh3
from markdown_it import MarkdownIt
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name, guess_lexer_for_filename
from pygments.util import ClassNotFound

# Raw HTML in Markdown is shown as text, and the result is sanitised again by nh3, so neither a
# <script> nor an event handler nor a javascript: URL from a skill can reach the page.
_md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table").enable("strikethrough")


def _image_as_link(self, tokens, idx, options, env):
    # A reviewer's browser must not fetch what a skill points at (a tracking pixel tells its author
    # who reviewed it, and when); the Content-Security-Policy blocks remote images anyway, so an
    # image is shown as a link to it instead.
    token = tokens[idx]
    alt = self.renderInline(token.children or [], options, env) or "image"
    src = escape(token.attrGet("src") or "")
    return f'<a href="{src}" class="image-link">[image: {alt}]</a>'


_md.add_render_rule("image", _image_as_link)

_ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "i", "li", "ol", "p", "pre", "s", "strong", "sub", "sup", "table", "tbody", "td", "th", "thead",
    "tr", "ul", "span", "div",
}
_ALLOWED_ATTRIBUTES = {"a": {"href", "title", "class"}, "code": {"class"}, "td": {"align"}, "th": {"align"}}


def render_markdown(text: str) -> str:
    rendered = _md.render(text or "")
    return nh3.clean(
        rendered,
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )


def _lexer(filename: str | None, language: str | None, code: str):
    try:
        if language:
            return get_lexer_by_name(language)
        if filename:
            name = filename.rsplit("/", 1)[-1]
            if name == "Dockerfile" or name.endswith(".Dockerfile") or name.startswith("Dockerfile."):
                return get_lexer_by_name("docker")
            return guess_lexer_for_filename(name, code)
    except ClassNotFound:
        pass
    return TextLexer()


def highlight_code(code: str, *, filename: str | None = None, language: str | None = None, anchor: str = "L") -> str:
    """Server-side highlighting with line numbers that link to themselves (#L12)."""
    formatter = HtmlFormatter(
        linenos="table", lineanchors=anchor, anchorlinenos=True, cssclass="highlight", wrapcode=True
    )
    return highlight(code or "", _lexer(filename, language, code or ""), formatter)

