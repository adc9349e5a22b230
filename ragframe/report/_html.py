"""HTML pieces: every text from a log or its metadata goes through `esc`, and long texts and
long verdict lists are cut (with a note saying how much), so a row cannot grow the report
without bound."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence
from typing import Any

#: Characters kept of one text (a question, an answer, a context, a claim, a reason).
TEXT_LIMIT = 1500
ITEM_TEXT_LIMIT = 400
#: Items kept of one list (contexts, verdicts).
LIST_LIMIT = 30


class Safe(str):
    """HTML built here from escaped parts: inserted as it is."""


def esc(value: Any) -> str:
    return value if isinstance(value, Safe) else html.escape(str(value), quote=True)


def clip(text: Any, limit: int = TEXT_LIMIT) -> Safe:
    """The text, escaped, cut at `limit` characters with a note of what was left out."""
    text = str(text)
    if len(text) <= limit:
        return Safe(esc(text))
    more = len(text) - limit
    return Safe(f"{esc(text[:limit])}<span class='cut'>… ({more:,} more characters)</span>")


def number(value: Any, digits: int = 3) -> str:
    """A figure for a table: '-' for none, integers with separators, floats to `digits`."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return "-" if value != value else f"{value:.{digits}f}"
    return str(value)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "grid") -> Safe:
    """A table; cells are escaped unless `Safe`; numbers are formatted by `number`."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            text = cell if isinstance(cell, Safe) else esc(number(cell))
            num = isinstance(cell, int | float) and not isinstance(cell, bool)
            cells.append(f"<td class='num'>{text}</td>" if num else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return Safe(
        f"<table class='{esc(cls)}'><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def key_values(pairs: Iterable[tuple[str, Any]]) -> Safe:
    """A two-column table of names and values; nested values as compact JSON."""
    rows = []
    for key, value in pairs:
        if isinstance(value, dict | list):
            value = Safe(f"<code>{clip(json.dumps(value, default=str), TEXT_LIMIT)}</code>")
        rows.append(f"<tr><th>{esc(key)}</th><td>{esc(number(value))}</td></tr>")
    return Safe(f"<table class='kv'>{''.join(rows)}</table>")


#: Verdict fields whose True is the bad outcome (a context that contradicts the answer).
TRUE_IS_BAD = frozenset({"contradicted"})
#: Verdicts given as words: answer_relevancy_llm's yes / no / idk, answer_correctness's
#: TP / FP / FN (a statement of the answer or the truth, found or not in the other).
VERDICT_WORDS: dict[str, bool | None] = {
    "yes": True,
    "no": False,
    "idk": None,
    "tp": True,
    "fp": False,
    "fn": False,
}
#: How a verdict is marked: good, bad, or neither (an "idk").
MARKS = {True: ("✓", "yes"), False: ("✗", "no"), None: ("?", "unsure")}


def mark(field: str, value: Any) -> tuple[str, str] | None:
    """The mark of one verdict field (symbol, CSS class), or None when the field is no
    verdict: a Boolean (True is good unless the field is in TRUE_IS_BAD) or a verdict word."""
    if isinstance(value, bool):
        return MARKS[value != (field in TRUE_IS_BAD)]
    if field == "verdict" and isinstance(value, str) and value.lower() in VERDICT_WORDS:
        return MARKS[VERDICT_WORDS[value.lower()]]
    return None


def _cell(field: str, value: Any) -> Safe:
    """One verdict field: verdicts marked ✓ / ✗ (by what they mean, not by True / False),
    numbers formatted, texts cut, a nested list of verdicts as its own table."""
    marked = mark(field, value)
    if marked is not None:
        word = ("yes" if value else "no") if isinstance(value, bool) else str(value)
        return Safe(f"<span class='{marked[1]}'>{marked[0]} {esc(word)}</span>")
    if value is None:
        return Safe("<span class='none'>-</span>")
    if isinstance(value, int | float):
        return Safe(esc(number(value)))
    if isinstance(value, list) and all(isinstance(i, dict) for i in value):
        return records(value)
    if isinstance(value, dict | list):
        return clip(json.dumps(value, default=str), ITEM_TEXT_LIMIT)
    return clip(value, ITEM_TEXT_LIMIT)


def _more(total: int) -> str:
    left = total - LIST_LIMIT
    return f"<p class='cut'>… {left:,} more not shown (of {total:,})</p>" if left > 0 else ""


def records(items: list[Any]) -> Safe:
    """A list of verdicts (dicts) as a table, one column per field; other lists as a list."""
    if not items:
        return Safe("<p class='none'>(empty)</p>")
    shown = items[:LIST_LIMIT]
    if all(isinstance(i, dict) for i in shown):
        fields = list(dict.fromkeys(k for i in shown for k in i))
        rows = [[_cell(f, i.get(f)) for f in fields] for i in shown]
        return Safe(table(fields, rows, "verdicts") + _more(len(items)))
    lis = "".join(f"<li>{_cell('', i)}</li>" for i in shown)
    return Safe(f"<ol>{lis}</ol>{_more(len(items))}")


#: Detail fields that say something only when not empty (the inputs cut to fit the prompt).
QUIET_WHEN_EMPTY = frozenset({"inputs_cut"})


def detail(value: dict[str, Any] | None) -> Safe:
    """A `{metric}_detail` struct: each verdict list as a table, then the scalar fields
    (the error first, highlighted, when there is one)."""
    if value is None:
        return Safe("<p class='none'>no detail recorded</p>")
    parts = []
    error = value.get("error")
    if error:
        parts.append(f"<p class='error'>error: {clip(error, TEXT_LIMIT)}</p>")
    scalars = []
    for key, field in value.items():
        if key in QUIET_WHEN_EMPTY and not field:
            continue
        if isinstance(field, list):
            parts.append(f"<h5>{esc(key)} ({len(field):,})</h5>{records(field)}")
        elif key != "error":
            scalars.append((key, field))
    if scalars:
        parts.append(key_values(scalars))
    return Safe("".join(parts))


def text_block(name: str, value: Any) -> Safe:
    """An input column of the row: a text, or a list of texts (contexts) numbered from 1."""
    if value is None:
        return Safe(f"<h5>{esc(name)}</h5><p class='none'>(null)</p>")
    if isinstance(value, list):
        lis = "".join(f"<li><div class='text'>{clip(v)}</div></li>" for v in value[:LIST_LIMIT])
        return Safe(f"<h5>{esc(name)} ({len(value):,})</h5><ol>{lis}</ol>{_more(len(value))}")
    return Safe(f"<h5>{esc(name)}</h5><div class='text'>{clip(value)}</div>")


def script_json(value: Any) -> str:
    """JSON to place inside a <script> element: every '<' escaped so no text in it can close
    the element (a group named '</script>' stays data)."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
