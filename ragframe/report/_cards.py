"""One row as a card: its ids and scores, its inputs, and each chosen metric's verdicts with
their reasons.

The report's worst rows and `ragframe.show` build their cards here (`card`), and draw them
with the same HTML (`card_html`, the report's `details.row`); `show` adds the styles, scoped
under `.rf-cards` (`STYLE`), and a terminal text of the same card (`card_text`). Verdicts are
marked by `_html.mark` in both, so a ✓ means the same thing in the report, a notebook and a
terminal."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragframe.report._html import (
    ITEM_TEXT_LIMIT,
    LIST_LIMIT,
    QUIET_WHEN_EMPTY,
    TEXT_LIMIT,
    Safe,
    clip,
    detail,
    esc,
    key_values,
    mark,
    number,
    text_block,
)


@dataclass(frozen=True)
class Card:
    """One row: `position` in the log (0-based); `ids` (id and group columns) and `texts`
    (the judged inputs) as (column, value); every metric's score; and `verdicts`, the
    `{metric}_detail` of each metric the card opens to (None where none was recorded)."""

    position: int
    ids: list[tuple[str, Any]]
    scores: list[tuple[str, Any]]
    texts: list[tuple[str, Any]]
    verdicts: list[tuple[str, dict[str, Any] | None]]

    @property
    def gist(self) -> str:
        """The first text input (the question, usually), for the card's one-line summary."""
        return next((v for _, v in self.texts if isinstance(v, str)), "")

    @property
    def lead(self) -> tuple[str, Any]:
        """The first metric the card opens to, and its score."""
        name = self.verdicts[0][0] if self.verdicts else self.scores[0][0]
        return name, dict(self.scores).get(name)


def card(
    row: Mapping[str, Any],
    *,
    position: int,
    shown: Sequence[str],
    metrics: Sequence[str],
    focus: Sequence[str],
) -> Card:
    """The card of a row read as a dict: `shown` are its display columns (ids, groups, the
    judged inputs), `metrics` the scores listed, `focus` the metrics whose verdicts it shows."""
    ids = [c for c in shown if c in row and not isinstance(row[c], list) and not _is_text(c)]
    return Card(
        position=position,
        ids=[(c, row[c]) for c in ids],
        scores=[(m, row.get(m)) for m in metrics],
        texts=[(c, row[c]) for c in shown if c in row and c not in ids],
        verdicts=[(m, row.get(f"{m}_detail")) for m in focus],
    )


def _is_text(column: str) -> bool:
    from ragframe.inputs.columns import ALIASES, CANONICAL

    return column in CANONICAL or column in ALIASES


# ------------------------------------------------------------------------------ HTML


def card_html(card: Card, *, opened: bool = False) -> Safe:
    """The card as `<details class='row'>`: the lead score, the row, its ids and the gist in
    the summary; the scores, the inputs and each metric's verdicts inside."""
    name, score = card.lead
    ids = " · ".join(f"{c} {v}" for c, v in card.ids)
    summary = (
        f"<span class='score'>{esc(number(score))}</span><span class='metric'>{esc(name)}</span>"
        f" · row {card.position:,}{' · ' + esc(ids) if ids else ''} "
        f"<span class='gist'>{clip(card.gist, 140)}</span>"
    )
    body = [
        key_values([(c, str(v)) for c, v in card.ids] + card.scores),
        *(text_block(c, v) for c, v in card.texts),
    ]
    for metric, found in card.verdicts:
        body += [f"<h4>{esc(metric)} verdicts</h4>", detail(found)]
    return Safe(
        f"<details class='row'{' open' if opened else ''}><summary>{summary}</summary>"
        f"<div class='body'>{''.join(body)}</div></details>"
    )


#: The cards' styles, in the report's worst rows and in a notebook's output alike: every rule
#: under `.rf-cards`, so nothing of the notebook's (or the report's) other styling changes.
STYLE = """
.rf-cards { --ink: #1d2530; --muted: #5b6675; --line: #d9dee5; --soft: #f4f6f9;
  font: 13px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  background: #fff; padding: 4px 2px; text-align: left; }
.rf-cards * { box-sizing: border-box; font-family: inherit; }
.rf-cards p.note { color: var(--muted); margin: 2px 0 6px; }
.rf-cards h4 { font-size: 13px; margin: 12px 0 4px; color: var(--ink); }
.rf-cards h5 { font-size: 12px; margin: 10px 0 4px; color: var(--muted); }
.rf-cards table { border-collapse: collapse; margin: 6px 0 10px; font-size: 12px; width: auto;
  table-layout: auto; border: none; }
.rf-cards th, .rf-cards td { border: 1px solid var(--line); padding: 3px 8px; text-align: left;
  vertical-align: top; color: var(--ink); background: #fff; }
.rf-cards thead th, .rf-cards table.kv th { background: var(--soft); font-weight: 600; }
.rf-cards td.num { text-align: right; font-variant-numeric: tabular-nums; }
.rf-cards table.verdicts td { max-width: 520px; white-space: normal; }
.rf-cards code { font: 11px monospace; word-break: break-all; }
.rf-cards ol { margin: 4px 0; padding-left: 26px; }
.rf-cards .error { color: #b03a2e; }
.rf-cards .cut, .rf-cards .none { color: var(--muted); font-style: italic; }
.rf-cards .yes { color: #1e7b34; } .rf-cards .no { color: #b03a2e; }
.rf-cards .unsure { color: #8a5a00; }
.rf-cards details.row { border: 1px solid var(--line); border-radius: 5px; margin: 6px 0; }
.rf-cards details.row > summary { cursor: pointer; padding: 5px 8px; background: var(--soft); }
.rf-cards details.row .body { padding: 4px 12px 10px; }
.rf-cards .score { font-weight: 700; font-variant-numeric: tabular-nums; margin-right: 6px; }
.rf-cards .metric { color: var(--muted); }
.rf-cards .gist { color: var(--muted); margin-left: 6px; }
.rf-cards .text { white-space: pre-wrap; background: var(--soft); padding: 6px 8px;
  border-radius: 4px; }
"""


def styled(*parts: str) -> Safe:
    """HTML holding cards, in the element their scoped styles apply to (with those styles)."""
    return Safe(f"<div class='rf-cards'><style>{STYLE}</style>{''.join(parts)}</div>")


def cards_html(cards: Sequence[Card], note: str) -> str:
    """Cards for a notebook: the note, then each card opened; styles scoped, no script."""
    return styled(f"<p class='note'>{esc(note)}</p>", *(card_html(c, opened=True) for c in cards))


# ------------------------------------------------------------------------------ text


def width() -> int:
    """The terminal's width, kept between 60 and 100 columns."""
    return max(60, min(shutil.get_terminal_size((100, 24)).columns, 100))


def card_text(card: Card, columns: int | None = None) -> str:
    """The card for a terminal: the same parts as its HTML, wrapped to `columns`."""
    out = _Lines(columns or width())
    name, score = card.lead
    head = [f"{name} {number(score)}", f"row {card.position:,}"]
    head += [f"{c} {v}" for c, v in card.ids]
    out.rule(" · ".join(head))
    out.pairs("scores: ", [(m, number(v)) for m, v in card.scores], 0, 8)
    for column, value in card.texts:
        if isinstance(value, list):
            out.line(f"{column} ({len(value):,}):")
            for i, item in enumerate(value[:LIST_LIMIT], 1):
                out.wrap(f"[{i}] {_cut(item, TEXT_LIMIT)}", 2, 6)
            out.more(len(value), 2)
        else:
            out.line(f"{column}:")
            out.wrap("(null)" if value is None else _cut(value, TEXT_LIMIT), 2, 2)
    for metric, found in card.verdicts:
        out.line(f"{metric} verdicts:")
        _detail_text(out, found)
    return out.text()


def cards_text(cards: Sequence[Card], note: str, columns: int | None = None) -> str:
    width_ = columns or width()
    parts = [textwrap.fill(note, width_)]
    parts += [card_text(c, width_) for c in cards]
    return "\n\n".join(parts)


#: Holds a name and its value together while a line is wrapped (textwrap breaks at spaces).
_GLUE = "\0"


class _Lines:
    """Lines of text wrapped to a width, each paragraph of a text kept."""

    def __init__(self, columns: int) -> None:
        self.columns = columns
        self.lines: list[str] = []

    def line(self, text: str, indent: int = 0) -> None:
        self.lines.append(" " * indent + text)

    def rule(self, text: str) -> None:
        self.lines.append(f"── {text} ".ljust(self.columns, "─"))

    def wrap(self, text: str, indent: int, hang: int) -> None:
        first, rest = " " * indent, " " * hang
        for k, para in enumerate(text.splitlines() or [""]):
            filled = textwrap.fill(
                para,
                self.columns,
                initial_indent=first if k == 0 else rest,
                subsequent_indent=rest,
                break_long_words=True,
                break_on_hyphens=False,
            )
            self.lines.append(filled or (first if k == 0 else rest).rstrip())

    def pairs(self, label: str, pairs: Sequence[tuple[str, str]], indent: int, hang: int) -> None:
        """Names and values joined by " · ", wrapped between pairs, never inside one."""
        glued = " · ".join(f"{k} {v}".replace(" ", _GLUE) for k, v in pairs)
        start = len(self.lines)
        self.wrap(label + glued, indent, hang)
        self.lines[start:] = [line.replace(_GLUE, " ") for line in self.lines[start:]]

    def more(self, total: int, indent: int) -> None:
        if total > LIST_LIMIT:
            self.line(f"… {total - LIST_LIMIT:,} more not shown (of {total:,})", indent)

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.lines)


def _cut(text: Any, limit: int) -> str:
    text = str(text)
    more = len(text) - limit
    return text if more <= 0 else f"{text[:limit]}… ({more:,} more characters)"


def _detail_text(out: _Lines, found: Mapping[str, Any] | None) -> None:
    """A `{metric}_detail` as `_html.detail` lays it out: the error, each verdict list, then
    the other fields."""
    if found is None:
        out.line("no detail recorded", 2)
        return
    if found.get("error"):
        out.wrap(f"error: {_cut(found['error'], TEXT_LIMIT)}", 2, 4)
    scalars = []
    for key, value in found.items():
        if key in QUIET_WHEN_EMPTY and not value:
            continue
        if isinstance(value, list):
            out.line(f"{key} ({len(value):,}):", 2)
            if not value:
                out.line("(empty)", 4)
            for item in value[:LIST_LIMIT]:
                _item_text(out, item, 4)
            out.more(len(value), 4)
        elif key != "error" and value is not None:
            scalars.append((key, value))
    reason = dict(scalars).pop("reason", None)
    if reason is not None:
        out.wrap(f"reason: {_cut(reason, TEXT_LIMIT)}", 2, 4)
    rest = [(k, _value(v)) for k, v in scalars if k != "reason"]
    if rest:
        out.pairs("", rest, 2, 4)


#: Fields naming an input by its position (1-based), shown as "context 2" when an item has no
#: text of its own.
POSITIONS = {
    "context_index": "context",
    "reference_index": "reference",
    "best_context_index": "context",
    "best_reference_index": "reference",
}


def _item_text(out: _Lines, item: Any, indent: int) -> None:
    """One verdict: its mark and text (the claim, statement, fact, question or the input it
    judges), its other fields in brackets, its reason below; a nested list indented."""
    if not isinstance(item, dict):
        out.wrap(f"· {_cut(_value(item), ITEM_TEXT_LIMIT)}", indent, indent + 2)
        return
    marked = next(((k, v, m) for k, v in item.items() if (m := mark(k, v))), None)
    text_key = next(
        (k for k, v in item.items() if isinstance(v, str) and k not in ("reason", "verdict")),
        None,
    )
    where = next((k for k in item if k in POSITIONS and item[k] is not None), None)
    if text_key is not None:
        text = _cut(item[text_key], ITEM_TEXT_LIMIT)
    elif where is not None:
        text = f"{POSITIONS[where]} {item[where]}"
    else:
        text = ""
    skip = {text_key, "reason", marked[0] if marked else None}
    if text_key is None:
        skip.add(where)
    fields = []
    if marked is not None:
        key, value, _ = marked
        fields.append(f"{key}: {('yes' if value else 'no') if isinstance(value, bool) else value}")
    nested = [(k, v) for k, v in item.items() if isinstance(v, list)]
    fields += [
        f"{k}: {_value(v)}"
        for k, v in item.items()
        if k not in skip and not isinstance(v, list) and v is not None
    ]
    symbol = marked[2][0] if marked is not None else "·"
    bracket = f"[{' · '.join(fields)}]" if fields else ""
    out.wrap(f"{symbol} {text}  {bracket}" if text else f"{symbol} {bracket}", indent, indent + 2)
    if item.get("reason"):
        out.wrap(_cut(item["reason"], ITEM_TEXT_LIMIT), indent + 4, indent + 4)
    for key, value in nested:
        out.line(f"{key} ({len(value):,}):", indent + 2)
        for sub in value[:LIST_LIMIT]:
            _item_text(out, sub, indent + 4)
        out.more(len(value), indent + 4)


def _value(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return number(value)
