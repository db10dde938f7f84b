"""The report's document model and its two renderings: a :class:`Doc` of headings, paragraphs,
bullet lists, :class:`Table` s and :class:`Figure` s, written as Markdown (``report.md``) and as one
self-contained HTML page (``index.html``: inline CSS, PNGs as base64). Both show the same strings, so
the number formatting lives here too."""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MISSING = "–"


# ---------------------------------------------------------------- formatting
def fmt(x: float | None, digits: int | str = 2) -> str:
    """``digits`` decimals, or a format spec such as ``".3g"``; ``–`` for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    return format(x, digits if isinstance(digits, str) else f".{digits}f")


def fmt_summary(summary: dict[str, float] | None, digits: int | str = 2) -> str:
    """``mean ± std`` of a :class:`focalcse.eval.stats.Summary` dict."""
    if not summary:
        return MISSING
    return f"{fmt(summary['mean'], digits)} ± {fmt(summary['std'], digits)}"


def fmt_p(test: dict[str, Any] | None, key: str = "p_value", decision: str = "significant") -> str:
    """A test's p-value ``key`` (raw ``p_value``, or ``p_holm``) to 3 significant digits, `` *`` when
    its ``decision`` flag is set; ``n/a`` when undefined, ``–`` when the test lacks it."""
    if not test or key not in test:
        return MISSING
    p = test[key]
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "n/a"
    return f"{p:.3g}{' *' if test.get(decision) else ''}"


def fmt_diff(test: dict[str, Any] | None, digits: int | str = 2) -> str:
    """The paired test's mean difference with its sign."""
    if not test or test.get("mean_diff") is None:
        return MISSING
    d = test["mean_diff"]
    return (
        MISSING if math.isnan(d) else format(d, "+" + (digits if isinstance(digits, str) else f".{digits}f"))
    )


def fmt_seconds(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


# ---------------------------------------------------------------- document model
@dataclass
class Table:
    """A table both renderers share, so Markdown and HTML show the same strings."""

    title: str
    header: list[str]
    rows: list[list[str]]
    caption: str = ""
    row_classes: list[str] = field(default_factory=list)  # "ours" | "test" | "published" | ""
    text_columns: tuple[int, ...] = ()  # left-aligned prose columns (sentences)


@dataclass
class Figure:
    path: Path  # the PNG
    caption: str


@dataclass
class Doc:
    title: str
    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def h2(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: Sequence[str]) -> None:
        self.blocks.append(("ul", list(items)))

    def table(self, table: Table) -> None:
        self.blocks.append(("table", table))

    def figure(self, figure: Figure) -> None:
        self.blocks.append(("figure", figure))

    def headings(self) -> list[str]:
        """The section headings, in order."""
        return [text for kind, text in self.blocks if kind == "h2"]


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_markdown(t: Table) -> str:
    lines = [f"**{t.title}**", ""] if t.title else []
    lines.append("| " + " | ".join(_md_cell(h) for h in t.header) + " |")
    lines.append("|" + "---|" * len(t.header))
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    if t.caption:
        lines += ["", f"_{t.caption}_"]
    return "\n".join(lines)


def to_markdown(doc: Doc, out_dir: Path) -> str:
    out = [f"# {doc.title}", ""]
    for kind, block in doc.blocks:
        if kind == "h2":
            out += [f"## {block}", ""]
        elif kind == "p":
            out += [block, ""]
        elif kind == "ul":
            out += [f"- {item}" for item in block] + [""]
        elif kind == "table":
            out += [table_markdown(block), ""]
        elif kind == "figure":
            rel = block.path.relative_to(out_dir).as_posix()
            out += [f"![{block.caption}]({rel})", "", f"_{block.caption}_", ""]
    return "\n".join(out)


_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*")


def _inline_html(text: str) -> str:
    """Escape ``text``; render `code` and **bold** (the only inline markup the report uses)."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos : m.start()]))
        if m.group(1) is not None:
            out.append(f"<code>{html.escape(m.group(1))}</code>")
        else:
            out.append(f"<strong>{html.escape(m.group(2))}</strong>")
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;max-width:1150px;margin:24px auto;
 padding:0 16px;color:#222;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #444;padding-bottom:6px}
h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ccc;padding-bottom:3px}
table{border-collapse:collapse;margin:8px 0 4px 0;font-size:0.86em}
th,td{border:1px solid #bbb;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left}
tr.published td{color:#555;font-style:italic;background:#f7f7fb}
tr.test td{background:#fffbe6}
tr.ours td:first-child{font-weight:600}
.caption{font-size:0.84em;color:#555;margin:2px 0 14px 0}
.tabletitle{font-weight:600;margin-top:12px}
figure{margin:10px 0 18px 0}
figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:0.84em;color:#555}
code{background:#f3f3f3;padding:0 3px;border-radius:3px}
td.text,th.text{text-align:left;max-width:330px}
"""


def table_html(t: Table) -> str:
    parts = [f'<div class="tabletitle">{_inline_html(t.title)}</div>'] if t.title else []
    parts.append("<table>")

    def td(tag: str, j: int, text: str) -> str:
        return f'<{tag} class="text">{text}</{tag}>' if j in t.text_columns else f"<{tag}>{text}</{tag}>"

    parts.append("<tr>" + "".join(td("th", j, _inline_html(h)) for j, h in enumerate(t.header)) + "</tr>")
    for i, row in enumerate(t.rows):
        cls = t.row_classes[i] if i < len(t.row_classes) else ""
        # data cells are plain text: sentences may hold backticks or asterisks
        cells = "".join(td("td", j, html.escape(str(c))) for j, c in enumerate(row))
        parts.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    parts.append("</table>")
    if t.caption:
        parts.append(f'<div class="caption">{_inline_html(t.caption)}</div>')
    return "\n".join(parts)


def to_html(doc: Doc) -> str:
    """One HTML page with no external resource: inline CSS, PNGs as base64 data URIs."""
    body = [f"<h1>{_inline_html(doc.title)}</h1>"]
    for kind, block in doc.blocks:
        if kind == "h2":
            body.append(f"<h2>{_inline_html(block)}</h2>")
        elif kind == "p":
            body.append(f"<p>{_inline_html(block)}</p>")
        elif kind == "ul":
            body.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in block) + "</ul>")
        elif kind == "table":
            body.append(table_html(block))
        elif kind == "figure":
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            body.append(
                f'<figure><img alt="{html.escape(block.caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{_inline_html(block.caption)}</figcaption></figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(doc.title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )
