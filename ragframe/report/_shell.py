"""The page around the sections: inlined style, the inlined Vega bundle, the figures' specs as
JSON data, and the script that draws them. Each figure's element gets `data-drawn="1"` once
drawn, or `"error"` with the reason written in its place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragframe.report._html import esc, script_json

STYLE = """
:root { --ink: #1d2530; --muted: #5b6675; --line: #d9dee5; --soft: #f4f6f9; --accent: #4c78a8; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  margin: 0; background: #fff; }
header { padding: 18px 28px 8px; border-bottom: 1px solid var(--line); background: var(--soft); }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 2px 0; color: var(--muted); }
nav { margin-top: 8px; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1400px; }
section { margin-top: 26px; }
h2 { font-size: 18px; border-bottom: 2px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
h4 { font-size: 14px; margin: 12px 0 4px; }
h5 { font-size: 13px; margin: 10px 0 4px; color: var(--muted); }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
thead th { background: var(--soft); }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.kv th { background: var(--soft); font-weight: 600; }
table.verdicts td { max-width: 520px; }
code { font-size: 12px; word-break: break-all; }
.figures { display: flex; flex-wrap: wrap; gap: 18px; }
figure.rf-figure { margin: 0; padding: 10px; border: 1px solid var(--line); border-radius: 6px; }
figcaption { color: var(--muted); font-size: 12px; max-width: 520px; }
.rf-chart[data-drawn="error"] { color: #b03a2e; }
.note { color: var(--muted); }
.warning { color: #8a5a00; background: #fff6e0; padding: 6px 10px; border-radius: 4px; }
.error { color: #b03a2e; }
.cut, .none { color: var(--muted); font-style: italic; }
.yes { color: #1e7b34; } .no { color: #b03a2e; }
details.row { border: 1px solid var(--line); border-radius: 5px; margin: 4px 0; }
details.row > summary { cursor: pointer; padding: 5px 8px; background: var(--soft); }
details.row .body { padding: 4px 12px 10px; }
.score { font-weight: 700; font-variant-numeric: tabular-nums; margin-right: 6px; }
.gist { color: var(--muted); margin-left: 6px; }
.text { white-space: pre-wrap; background: var(--soft); padding: 6px 8px; border-radius: 4px; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; }
"""

DRAW = """
(function () {
  var specs = JSON.parse(document.getElementById('rf-specs').textContent);
  var options = {mode: 'vega-lite', renderer: 'svg', actions: false};
  document.querySelectorAll('.rf-chart').forEach(function (el) {
    var spec = specs[Number(el.getAttribute('data-index'))];
    if (typeof vegaEmbed !== 'function') {
      el.setAttribute('data-drawn', 'error');
      el.textContent = 'This figure could not be drawn: the plotting script did not run.';
      return;
    }
    vegaEmbed(el, spec, options).then(function () {
      el.setAttribute('data-drawn', '1');
    }).catch(function (err) {
      el.setAttribute('data-drawn', 'error');
      el.textContent = 'This figure could not be drawn: ' + err;
    });
  });
  document.querySelectorAll('button[data-open]').forEach(function (button) {
    button.addEventListener('click', function () {
      var open = button.getAttribute('data-open') === '1';
      document.querySelectorAll('details.row').forEach(function (d) { d.open = open; });
    });
  });
})();
"""


def page(
    title: str,
    lines: Sequence[str],
    nav: Sequence[tuple[str, str]],
    sections: Sequence[str],
    specs: list[dict[str, Any]],
    bundle: str,
) -> str:
    """The whole HTML document; `sections` are already-escaped HTML, `lines` plain text."""
    links = "".join(f"<a href='#{esc(anchor)}'>{esc(name)}</a>" for anchor, name in nav)
    intro = "".join(f"<p>{esc(line)}</p>" for line in lines)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{STYLE}</style>"
        f"<script>{bundle}</script></head><body>"
        f"<header><h1>{esc(title)}</h1>{intro}<nav>{links}</nav></header>"
        "<noscript><p class='warning'>The figures need JavaScript; the tables and rows "
        "below do not.</p></noscript>"
        f"<main>{''.join(sections)}</main>"
        f"<script type='application/json' id='rf-specs'>{script_json(specs)}</script>"
        f"<script>{DRAW}</script></body></html>\n"
    )
