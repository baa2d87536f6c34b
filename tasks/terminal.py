"""Terminal output (build logs, solve.sh and test.sh output) as HTML with its ANSI colours.

The text comes from programs a model wrote, so it is untrusted: every character of it is
escaped, and the only markup added is <span class="ansi-..."> with class names from a fixed
set. Colour codes become classes (no style attributes), so 24-bit colours fall back to the
default colour rather than putting numbers from the log into the page. Other escape sequences
(cursor movement, erasing, window titles) are dropped, and a carriage return keeps what was
drawn last on the line, as a terminal shows a progress bar.
"""
from __future__ import annotations

import html
import re

from django.utils.safestring import SafeString, mark_safe

# CSI ... final byte, OSC ... BEL/ST, and two-character escapes
_ESCAPE = re.compile(r"\x1b(?:\[([0-9;:?]*)([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")

_FG = {30 + i: i for i in range(8)} | {90 + i: 8 + i for i in range(8)}
_BG = {40 + i: i for i in range(8)} | {100 + i: 8 + i for i in range(8)}


class _State:
    def __init__(self):
        self.reset()

    def reset(self):
        self.bold = self.dim = self.italic = self.underline = self.inverse = False
        self.fg: int | None = None
        self.bg: int | None = None

    def classes(self) -> str:
        names = [n for n, on in (("ansi-bold", self.bold), ("ansi-dim", self.dim), ("ansi-italic", self.italic),
                                 ("ansi-underline", self.underline)) if on]
        fg, bg = (self.bg, self.fg) if self.inverse else (self.fg, self.bg)
        if self.inverse and fg is None:
            names.append("ansi-inverse")
        if fg is not None:
            names.append(f"ansi-fg-{fg}")
        if bg is not None:
            names.append(f"ansi-bg-{bg}")
        return " ".join(names)

    def apply(self, params: str) -> None:
        codes = [int(p) if p.isdigit() else 0 for p in params.replace(":", ";").split(";")] if params else [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                self.reset()
            elif c == 1:
                self.bold = True
            elif c == 2:
                self.dim = True
            elif c == 3:
                self.italic = True
            elif c == 4:
                self.underline = True
            elif c == 7:
                self.inverse = True
            elif c == 22:
                self.bold = self.dim = False
            elif c == 23:
                self.italic = False
            elif c == 24:
                self.underline = False
            elif c == 27:
                self.inverse = False
            elif c in _FG:
                self.fg = _FG[c]
            elif c in _BG:
                self.bg = _BG[c]
            elif c == 39:
                self.fg = None
            elif c == 49:
                self.bg = None
            elif c in (38, 48):
                # 38;5;n (256 colours: the first 16 map to ours) or 38;2;r;g;b (ignored)
                mode = codes[i + 1] if i + 1 < len(codes) else None
                if mode == 5 and i + 2 < len(codes):
                    n = codes[i + 2]
                    colour = n if 0 <= n < 16 else None
                    if c == 38:
                        self.fg = colour
                    else:
                        self.bg = colour
                    i += 2
                elif mode == 2:
                    i += 4
            i += 1


def _overstrike(line: str) -> str:
    # "\r" returns to the start of the line: what was drawn after the last one wins where it
    # overlaps (progress bars); a trailing "\r" (CRLF line ends) changes nothing.
    if "\r" not in line.rstrip("\r"):
        return line.rstrip("\r")
    result = ""
    for part in line.rstrip("\r").split("\r"):
        result = part + result[len(part):]
    return result


def ansi_to_html(text: str | None) -> SafeString:
    """HTML for a <pre>: escaped text in spans for the colours in force."""
    text = text or ""
    lines = [_overstrike(line) for line in text.split("\n")]
    state = _State()
    out: list[str] = []
    open_span = False
    for n, line in enumerate(lines):
        if n:
            out.append("\n")
        pos = 0
        for m in _ESCAPE.finditer(line):
            if m.start() > pos:
                out.append(html.escape(_CONTROL.sub("", line[pos:m.start()]), quote=False))
            pos = m.end()
            if m.group(2) == "m":
                state.apply(m.group(1) or "")
                if open_span:
                    out.append("</span>")
                    open_span = False
                classes = state.classes()
                if classes:
                    out.append(f'<span class="{classes}">')
                    open_span = True
        if pos < len(line):
            out.append(html.escape(_CONTROL.sub("", line[pos:]), quote=False))
    if open_span:
        out.append("</span>")
    return mark_safe("".join(out))


def strip_ansi(text: str | None) -> str:
    return _CONTROL.sub("", _ESCAPE.sub("", text or ""))
