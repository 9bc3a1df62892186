"""The report's HTML and Markdown (core): pure text from prepared sections.

Everything that comes from a run - model names, URLs, a server's /version, validate details
that quote model output - is untrusted text: HTML escapes it with `html.escape`; Markdown
also backslash-escapes the punctuation that would make links, images or emphasis, and fences
code with more backticks than the code holds. The only markup is this module's own. The page is
self-contained: plots are inline PNG data URLs, styles are inline, and its one script
counts the plots that rendered (the browser check reads `data-plots-rendered`).

A section's highlights (the report's verdict) come first in it, in a box: a bordered,
tinted block in HTML, a block quote of list items in Markdown; each line is a label and
a text, both escaped like any other text.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from servekit import mdtext

Tone = Literal["good", "bad", "info"]


@dataclass(frozen=True, slots=True)
class Figure:
    """One plot: a file name, a title, PNG bytes and a caption."""

    name: str
    title: str
    png: bytes
    caption: str


@dataclass(frozen=True, slots=True)
class Table:
    """A table: a caption, a header row and body rows of text cells."""

    caption: str
    header: Sequence[str]
    rows: Sequence[Sequence[str]]


@dataclass(frozen=True, slots=True)
class Highlight:
    """One line of a highlighted box: a short label, its text, and a tone (`good`, `bad`
    or `info`) that HTML shows as the line's colour mark; the text itself must say it."""

    label: str
    text: str
    tone: Tone = "info"


@dataclass(frozen=True, slots=True)
class Section:
    """A titled part of the report: highlighted lines, paragraphs, tables and
    preformatted lines."""

    title: str
    paragraphs: Sequence[str] = ()
    tables: Sequence[Table] = ()
    code: Sequence[str] = ()
    figures: Sequence[Figure] = field(default=())
    highlights: Sequence[Highlight] = ()


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; }
caption { text-align: left; font-weight: 600; padding: .3em 0; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; white-space: pre-wrap; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .85em; color: #555; }
.highlights { background: #f4f7fb; border: 1px solid #c5d3e3; border-radius: 6px;
  padding: .5em 1em; margin: .8em 0 1.6em; font-size: 1.05em; }
.highlights ul { list-style: none; margin: 0; padding: 0; }
.highlights li { margin: .3em 0; padding-left: .6em; border-left: 5px solid #7a8ca3; }
.highlights li.good { border-left-color: #2e7d32; }
.highlights li.bad { border-left-color: #c62828; background: #fdecec; }
"""

_COUNT_SCRIPT = """
window.addEventListener("load", function () {
  var shown = 0;
  document.querySelectorAll("figure img").forEach(function (img) {
    if (img.complete && img.naturalWidth > 0) { shown += 1; }
  });
  document.body.setAttribute("data-plots-rendered", String(shown));
});
"""


def _table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    return (f"<table><caption>{html.escape(table.caption)}</caption><thead><tr>{head}</tr>"
            f"</thead><tbody>{body}</tbody></table>")  # fmt: skip


def _figure_html(fig: Figure) -> str:
    data = base64.b64encode(fig.png).decode("ascii")
    return (f'<figure id="{html.escape(fig.name)}"><img alt="{html.escape(fig.title)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{html.escape(fig.title)}: '
            f"{html.escape(fig.caption)}</figcaption></figure>")  # fmt: skip


def _highlights_html(lines: Sequence[Highlight]) -> str:
    items = "".join(
        f'<li class="{html.escape(line.tone)}"><strong>{html.escape(line.label)}:</strong> '
        f"{html.escape(line.text)}</li>"
        for line in lines
    )
    return f'<div class="highlights"><ul>{items}</ul></div>'


def render_html(title: str, sections: Sequence[Section]) -> str:
    """The whole self-contained report.html."""
    parts = [f"<h1>{html.escape(title)}</h1>"]
    count = 0
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.highlights:
            parts.append(_highlights_html(section.highlights))
        parts += [f"<p>{html.escape(p)}</p>" for p in section.paragraphs]
        parts += [_table_html(t) for t in section.tables]
        if section.code:
            parts.append("<pre>" + html.escape("\n".join(section.code)) + "</pre>")
        parts += [_figure_html(f) for f in section.figures]
        count += len(section.figures)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f'<body data-plots-expected="{count}" data-plots-rendered="0">'
        + "\n".join(parts)
        + f"<script>{_COUNT_SCRIPT}</script></body></html>\n"
    )


def render_markdown(title: str, sections: Sequence[Section]) -> str:
    """report.md: the same content, plots linked as the PNG files beside it."""
    lines = [f"# {mdtext.cell(title)}", ""]  # titles hold run directory names
    for section in sections:
        lines += [f"## {mdtext.cell(section.title)}", ""]
        if section.highlights:
            lines += [f"> - **{mdtext.cell(h.label.strip())}:** {mdtext.cell(h.text)}"
                      for h in section.highlights]  # fmt: skip
            lines.append("")
        for text in section.paragraphs:
            lines += [mdtext.paragraph(text), ""]
        for table in section.tables:
            lines += [f"**{mdtext.cell(table.caption)}**", ""]
            lines.append("| " + " | ".join(mdtext.cell(h) for h in table.header) + " |")
            lines.append("|" + "---|" * len(table.header))
            lines += ["| " + " | ".join(mdtext.cell(c) for c in row) + " |" for row in table.rows]
            lines.append("")
        if section.code:
            fence = mdtext.fence(section.code)
            lines += [fence, *section.code, fence, ""]
        for fig in section.figures:
            lines += [
                f"![{mdtext.cell(fig.title)}]({fig.name}.png)",
                "",
                f"*{mdtext.cell(fig.caption)}*",
                "",
            ]
    return "\n".join(lines)
