"""Checks that a rendered page carries no active content that came from untrusted text."""
from html.parser import HTMLParser


class _ActiveContent(HTMLParser):
    def __init__(self, allowed_script_srcs: set[str]):
        super().__init__()
        self.allowed = allowed_script_srcs
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            src = attrs.get("src") or ""
            kind = attrs.get("type") or ""
            # our own static scripts and JSON data islands are expected; anything else is not
            if not (src.startswith("/static/") or kind == "application/json"):
                self.found.append(f"<script {attrs}>")
        for name, value in attrs.items():
            if name.startswith("on"):
                self.found.append(f"<{tag} {name}={value!r}>")
            if name in {"href", "src", "action", "formaction"} and (value or "").strip().lower().startswith(("javascript:", "data:text/html")):
                self.found.append(f"<{tag} {name}={value!r}>")


def active_content(html: str) -> list[str]:
    parser = _ActiveContent(set())
    parser.feed(html)
    return parser.found
