"""`ragframe.toml`: the judge, the metrics (G-Eval and rubrics with their criteria), thresholds,
gates and columns in one file, so that a CI job runs `ragframe score log.parquet -o out.parquet`
and `ragframe gate out.parquet` with no Python.

Where it is found: `--config FILE`, else `./ragframe.toml`, else `./pyproject.toml`'s
`[tool.ragframe]` table (`--no-config` ignores a found file). The file is read once and every
key checked before anything else happens (before the log is read or a request sent): an
unknown section or key (with the closest known one), a wrong type, a value out of range, an
unknown metric or input, a G-Eval without criteria or steps, a gate on a metric the file does
not score, two pass rules for one metric, a secret written in the file (never echoed); after
the command line is parsed, a key that needs another neither gives (a [gate] result file with
no gate). Each error is one line naming the file, the section and the key, and the command
exits 2.

How it applies: its values become the subcommand's defaults (`set_defaults`), then the command
line is parsed again, so a flag given on the command line always wins (even one given its
default value). `[metric.NAME]` tables are metrics built from the file: `--metrics` (and
`[score] metrics`) may name them like any metric.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import math
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ragframe.errors import ConfigError

__all__ = [
    "CONFIG_NAME",
    "READERS",
    "Config",
    "add_config_options",
    "apply",
    "config_metrics",
    "find_config",
    "judge_extras",
    "load_config",
    "metric_table",
    "trim_to",
    "wanted",
]

#: The file looked for in the working directory.
CONFIG_NAME = "ragframe.toml"
#: The subcommands that read the file, and the sections each takes its defaults from.
READERS: dict[str, tuple[str, ...]] = {
    "score": ("judge", "score", "metric", "gate"),
    "gate": ("score", "gate"),
    "compare": ("compare",),
    "generate": ("judge",),
    "metrics": (),  # takes no defaults: lists the [metric.NAME] tables beside the catalogue
}
#: The kinds a `[metric.NAME]` table builds besides the catalogue's metrics.
KINDS = ("g_eval", "rubric")


class _Where:
    """Names a key in error messages: `ragframe.toml: [metric.helpfulness] criteria: ...`."""

    def __init__(self, file: str, prefix: str) -> None:
        self.file, self.prefix = file, prefix

    def error(self, section: str, key: str | None, message: str) -> ConfigError:
        table = ".".join(p for p in (self.prefix, section) if p)
        head = f"{self.file}: [{table}]" if table else f"{self.file}:"
        return ConfigError(f"{head} {key}: {message}" if key else f"{head} {message}")


# Value checks: each takes (value, say) where `say(message)` builds the error for its key, and
# returns the value as the command line's option would hold it.

Check = Callable[[Any, Callable[[str], ConfigError]], Any]


def _got(value: Any) -> str:
    return f"got {value!r}" if not isinstance(value, dict) else "got a table"


def _string(value: Any, say: Callable[[str], ConfigError]) -> str:
    if not isinstance(value, str) or not value.strip():
        raise say(f"must be a non-empty string, {_got(value)}")
    return value


def _boolean(value: Any, say: Callable[[str], ConfigError]) -> bool:
    if not isinstance(value, bool):
        raise say(f"must be true or false, {_got(value)}")
    return value


def _integer(low: int, high: int = 1_000_000_000) -> Check:
    def check(value: Any, say: Callable[[str], ConfigError]) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise say(f"must be a whole number from {low} to {high}, {_got(value)}")
        return value

    return check


def _whole(value: Any, say: Callable[[str], ConfigError]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise say(f"must be a whole number, {_got(value)}")
    return value


def _number(rule: str, accepts: Callable[[float], bool]) -> Check:
    def check(value: Any, say: Callable[[str], ConfigError]) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not accepts(float(value)):
            raise say(f"must be {rule}, {_got(value)}")
        return float(value)

    return check


_positive = _number("a finite number above 0", lambda v: v > 0)
_non_negative = _number("a finite number 0 or more", lambda v: v >= 0)
_unit = _number("a number from 0 to 1", lambda v: 0 <= v <= 1)


def _strings(value: Any, say: Callable[[str], ConfigError]) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list):
        raise say(f"must be a list of strings, {_got(value)}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise say(f"must be a list of non-empty strings, got the item {item!r}")
    return [item.strip() for item in value]


def _names_to_unit(value: Any, say: Callable[[str], ConfigError]) -> dict[str, float]:
    """A table metric -> number in [0, 1] (thresholds, fail_under, min_pass_rate)."""
    if not isinstance(value, dict):
        raise say(
            f"must be a table of metric = number, like {{ faithfulness = 0.8 }}, {_got(value)}"
        )
    return {name: _unit(v, lambda m, n=name: say(f"{n}: {m}")) for name, v in value.items()}


def _columns(value: Any, say: Callable[[str], ConfigError]) -> dict[str, str]:
    """input = "column": each input one ragframe knows (a typo refused with the closest), so
    the mistake is caught with the file, not after the log is read."""
    from ragframe.inputs.columns import CANONICAL

    if not isinstance(value, dict):
        raise say(
            f'must be a table of input = "column", like {{ question = "prompt" }}, {_got(value)}'
        )
    for name in value:
        if name not in CANONICAL:
            raise say(f"{name!r} is not a ragframe input{_close(name, list(CANONICAL))}")
    return {name: _string(v, lambda m, n=name: say(f"{n}: {m}")) for name, v in value.items()}


def _price(value: Any, say: Callable[[str], ConfigError]) -> str:
    """[prompt, completion] or [prompt, completion, cached prompt] dollars per million
    tokens, as --price's text (`cli.options.parse_price` reads it)."""
    what = (
        "must be [prompt, completion] or [prompt, completion, cached prompt] dollars per "
        "million tokens, like [0.15, 0.6, 0.075]"
    )
    if not (isinstance(value, list) and len(value) in (2, 3)):
        raise say(f"{what}, {_got(value)}")
    parts = [_non_negative(v, say) for v in value]
    if len(parts) == 3 and parts[2] > parts[0]:
        raise say(f"{what}: the cached rate (third) is at most the prompt rate, got {value!r}")
    return ",".join(repr(part) for part in parts)


#: What a key looks like (a vendor's prefix, or a long run of mixed letters and digits): such a
#: value of api_key_env is the key itself, pasted where its variable's name belongs.
_KEY_LIKE = re.compile(
    r"^(sk|pk|rk|ghp|gho|ghs|github_pat|glpat|xox[abpr]|hf|gsk)[-_]"
    r"|^(?=.*\d)(?=.*[a-z])\S{32,}$"
)


def _env_name(value: Any, say: Callable[[str], ConfigError]) -> str:
    """The NAME of the variable holding the key. A string that is not a valid name, or looks
    like a key, is never echoed: it is most likely the key itself, and CI logs are public."""
    name_ok = isinstance(value, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value)
    if not name_ok or _KEY_LIKE.search(value):
        shown = (
            "got a string that is not a variable name (not shown: it may be the key itself; "
            "if so, revoke it)"
            if isinstance(value, str)
            else _got(value)
        )
        raise say(
            "must be the NAME of an environment variable holding the key (e.g. "
            f'"OPENAI_API_KEY"), never the key; {shown}'
        )
    return value


def _base_url(value: Any, say: Callable[[str], ConfigError]) -> str:
    url = _string(value, say)
    if urlparse(url).password:
        raise say(
            "holds a password; a secret never goes in the file: drop it from the URL and put "
            "the key in an environment variable named by api_key_env"
        )
    return url


def _cache(value: Any, say: Callable[[str], ConfigError]) -> str | bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip():
        return value
    raise say(f"must be a file path, or false for no cache, {_got(value)}")


#: [judge]: key -> check. Most are the judge options of `ragframe score` (underscores for
#: dashes); `cache = false`, `reasons = false`, `progress = false` are --no-cache,
#: --no-reasons, --no-progress; api_key_env, seed and max_attempts have no flag.
JUDGE_KEYS: dict[str, Check] = {
    "model": _string,
    "base_url": _base_url,
    "api_key_env": _env_name,
    "embedding_model": _string,
    "concurrency": _integer(1),
    "temperature": _number("a number from 0 to 2", lambda v: 0 <= v <= 2),
    "requests_per_minute": _positive,
    "tokens_per_minute": _positive,
    "timeout": _positive,
    "cache": _cache,
    "retry_failed": _boolean,
    "reasons": _boolean,
    "fail_fast": _boolean,
    "progress": _boolean,
    "max_cost": _non_negative,
    "price": _price,
    "max_text_chars": _integer(1),
    "seed": _integer(0, 2**63 - 1),
    "max_attempts": _integer(1, 100),
}
#: [judge] keys given to the Judge directly (no command-line flag).
JUDGE_ONLY = ("api_key_env", "seed", "max_attempts")

#: [score]: key -> check; `metrics` and `from` are checked apart.
SCORE_KEYS: dict[str, Check] = {
    "metrics": _strings,
    "columns": _columns,
    "thresholds": _names_to_unit,
    "strict": _strings,
    "sample": _integer(1),
    "seed": _integer(0, 2**32 - 1),
    "repeats": _integer(1, 100),
    "chunk_rows": _integer(1),
    "calibration": _strings,
    "from": _string,
}

#: [gate]: key -> check.
GATE_KEYS: dict[str, Check] = {
    "fail_under": _names_to_unit,
    "min_pass_rate": _names_to_unit,
    "ignore_failed": _boolean,
    "worst": _integer(0, 2**32 - 1),
    "junit": _string,
    "json": _string,
    "markdown": _string,
}


def _names(value: Any, say: Callable[[str], ConfigError]) -> list[str]:
    """A name or a list of names (`on = "id"`, `on = ["id", "run"]`)."""
    return [_string(value, say)] if isinstance(value, str) else _strings(value, say)


#: [compare]: key -> check (`ragframe compare A B` with no flag runs the regression check).
COMPARE_KEYS: dict[str, Check] = {
    "on": _names,
    "by": _names,
    "fail_if_worse": _names,
    "margin": _number("a number from 0 up to (not including) 1", lambda v: 0 <= v < 1),
    "level": _number("a confidence level strictly between 0 and 1", lambda v: 0 < v < 1),
    "ignore_failed": _boolean,
    "fail_if_unknown": _boolean,
    "junit": _string,
    "markdown": _string,
}

#: [gate]'s result files -> the dests of their options (`ragframe gate --junit FILE`); a
#: subcommand without the option (this version's `score`) leaves them to `ragframe gate`.
CI_FILES = {"junit": "junit", "json": "json_out", "markdown": "markdown"}
#: Dests the file sets that no option declares: what the handlers read from it.
INTERNAL = ("config", "config_judge", "config_no_cache")

#: Keys every [metric.NAME] table may have, whatever its kind.
METRIC_COMMON: dict[str, Check] = {
    "kind": _string,
    "threshold": _unit,
    "strict": _boolean,
    "reasons": _boolean,
}
G_EVAL_KEYS: dict[str, Check] = {
    "criteria": _string,
    "evaluation_steps": _strings,
    "inputs": _strings,
    "rubric": lambda v, say: v,  # checked by _g_eval_rubric
    "score_range": lambda v, say: v,
    "top_logprobs": _integer(0, 20),
    "require_logprobs": _boolean,
}
RUBRIC_KEYS: dict[str, Check] = {
    "rubric": lambda v, say: v,  # checked by _rubric_levels
    "inputs": _strings,
}

SECTIONS = ("judge", "score", "metric", "gate", "compare")
#: Options with no file form, by section: what the file says instead of a close key's name.
NO_FILE_FORM: dict[str, dict[str, str]] = {
    "compare": {
        "json": "--json prints the comparison to stdout and has no file form here; give it on "
        "the command line (ragframe compare A B --json > compare.json)",
        "csv": "--csv prints the table to stdout and has no file form here; give it on the "
        "command line (ragframe compare A B --csv > compare.csv)",
    },
}
#: Keys that would hold a secret: refused wherever they appear, with what to do instead.
SECRETS = ("api_key", "key", "token", "password", "secret")


@dataclass
class Config:
    """A checked configuration: where it came from and the values of each section, as the
    command line's options hold them (`defaults`), plus the metrics it builds."""

    path: Path
    #: How messages name it: `ragframe.toml`, or `pyproject.toml [tool.ragframe]`.
    label: str
    judge: dict[str, Any] = field(default_factory=dict)
    score: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    compare: dict[str, Any] = field(default_factory=dict)
    #: Names a key of this file in a message.
    where: _Where | None = None
    #: The metrics [metric.NAME] tables build, by name, in the file's order.
    metrics: dict[str, Any] = field(default_factory=dict)
    #: The pass rules [metric.NAME] tables give: name -> {"threshold": x} and/or {"strict": b}.
    pass_rules: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def shown(self) -> str:
        """How stderr and listings name the file: `ragframe.toml`, `pyproject.toml
        [tool.ragframe]`."""
        return self.label + _table(self)

    def defaults(self, command: str) -> dict[str, Any]:
        """The option values (argparse dests) this file gives `command`."""
        sections = READERS.get(command, ())
        out: dict[str, Any] = {}
        if "judge" in sections:
            out.update(_judge_defaults(self.judge))
        if "score" in sections:
            out.update(self._score_defaults(command))
        if "gate" in sections:
            out.update(_gate_defaults(self.gate))
        if "compare" in sections:
            out.update(_compare_defaults(self.compare))
        return out

    def _score_defaults(self, command: str) -> dict[str, Any]:
        score = self.score
        out: dict[str, Any] = {}
        thresholds = dict(score.get("thresholds", {}))
        strict = list(score.get("strict", []))
        if command != "score":  # a metric's own table sets its pass rule for the gate too
            for name, rule in self.pass_rules.items():
                if "threshold" in rule:
                    thresholds[name] = rule["threshold"]
                if rule.get("strict"):
                    strict.append(name)
        if thresholds:
            out["threshold"] = _pairs(thresholds)
        if strict:
            out["strict"] = ",".join(strict)
        if command != "score":
            return out
        if "metrics" in score or self.metrics:
            out["metrics"] = ",".join(self.scored())
        if "columns" in score:
            out["columns"] = dict(score["columns"])
        for key in ("sample", "seed", "repeats", "chunk_rows"):
            if key in score:
                out[key] = score[key]
        if "calibration" in score:
            out["calibration"] = list(score["calibration"])
        if "from" in score:
            out["from_format"] = score["from"]
        return out

    def scored(self) -> list[str]:
        """The metrics a run scores by this file: [score] metrics, else the core four and
        every metric the file defines."""
        from ragframe.metrics import CORE

        if "metrics" in self.score:
            return list(self.score["metrics"])
        return list(dict.fromkeys([*CORE, *self.metrics]))


def _pairs(values: Mapping[str, float]) -> str:
    """{faithfulness: 0.8} -> "faithfulness=0.8", as --fail-under and --threshold take it."""
    return ",".join(f"{name}={value!r}" for name, value in values.items())


def _judge_defaults(judge: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in judge.items():
        if key in JUDGE_ONLY:
            continue
        if key == "cache":
            if value is False:
                out["no_cache"] = True
            elif isinstance(value, str):
                out["cache"] = value
        elif key in ("reasons", "progress"):
            out[f"no_{key}"] = not value
        else:
            out[key] = value
    extra = {k: judge[k] for k in JUDGE_ONLY if k in judge}
    if extra:
        out["config_judge"] = extra
    if judge.get("cache") is False:
        out["config_no_cache"] = True
    return out


def _gate_defaults(gate: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("fail_under", "min_pass_rate"):
        if gate.get(key):
            out[key] = _pairs(gate[key])
    for key in ("ignore_failed", "worst"):
        if key in gate:
            out[key] = gate[key]
    out.update({dest: gate[key] for key, dest in CI_FILES.items() if key in gate})
    return out


def _compare_defaults(compare: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in compare.items():
        out[key] = ",".join(value) if isinstance(value, list) else value
    return out


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """`--config FILE` and `--no-config`, for a subcommand that reads the file."""
    group = parser.add_argument_group("configuration file")
    group.add_argument(
        "--config",
        dest="config_file",
        metavar="FILE",
        help=f"read options from this TOML file (default: ./{CONFIG_NAME}, else "
        "./pyproject.toml's [tool.ragframe]); options given on the command line win",
    )
    group.add_argument(
        "--no-config", action="store_true", help=f"ignore ./{CONFIG_NAME} and [tool.ragframe]"
    )


def find_config(given: str | None, *, cwd: Path | None = None) -> tuple[Path, str] | None:
    """The file to read and how messages name it: `given` (which must exist), else
    ./ragframe.toml, else ./pyproject.toml when it has a [tool.ragframe] table."""
    if given is not None:
        path = Path(given)
        if not path.is_file():
            raise ConfigError(f"--config {given}: no such file; check the path")
        return path, str(given)
    folder = cwd or Path.cwd()
    own = folder / CONFIG_NAME
    if own.is_file():
        return own, CONFIG_NAME
    project = folder / "pyproject.toml"
    if project.is_file():
        try:
            text = project.read_text(encoding="utf-8")
            data = tomllib.loads(text)
        except UnicodeDecodeError:
            return None  # not text: not ours to refuse
        except tomllib.TOMLDecodeError as err:
            if _OUR_TABLE.search(text):  # our table is there: ignoring it would drop the gates
                raise ConfigError(
                    f"pyproject.toml: not valid TOML ({err}), so its [tool.ragframe] cannot be "
                    "read; fix the file (or pass --no-config to run without it)"
                ) from None
            return None  # a pyproject.toml without our table is not ours to refuse
        if isinstance(data.get("tool"), dict) and "ragframe" in data["tool"]:
            return project, "pyproject.toml"
    return None


#: A [tool.ragframe...] header (or a tool.ragframe dotted key) in a pyproject.toml's raw text.
_OUR_TABLE = re.compile(
    r'^\s*(\[{1,2}\s*tool\s*\.\s*"?ragframe"?\s*[\].]|tool\s*\.\s*"?ragframe"?\s*[.=])',
    re.MULTILINE,
)


def load_config(path: Path, label: str | None = None) -> Config:
    """Read and check the whole file (see the module docstring); a ConfigError names the
    file, the section and the key of the first problem."""
    label = label or str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{label}: not valid TOML ({err}); fix the file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{label}: not UTF-8 text; save it as UTF-8") from None
    prefix = ""
    if path.name == "pyproject.toml":  # ours is its [tool.ragframe] table
        tool = data.get("tool", {})
        if not (isinstance(tool, dict) and "ragframe" in tool):
            raise ConfigError(
                f"--config {label}: it has no [tool.ragframe] table; add one, or name a "
                f"{CONFIG_NAME}"
            )
        data, prefix = tool["ragframe"], "tool.ragframe"
        if not isinstance(data, dict):
            raise ConfigError(f"{label}: [tool.ragframe] must be a table")
    where = _Where(label, prefix)
    return _parse(data, path, label, where)


def _parse(data: dict[str, Any], path: Path, label: str, where: _Where) -> Config:
    for name, value in data.items():
        if name not in SECTIONS:
            raise where.error("", None, f"unknown section [{name}]{_close(name, SECTIONS)}")
        if not isinstance(value, dict):
            raise where.error("", None, f"[{name}] must be a table, got {value!r}")
    config = Config(path=path, label=label, where=where)
    config.judge = _section(data.get("judge", {}), "judge", JUDGE_KEYS, where)
    score = dict(data.get("score", {}))
    metrics = score.pop("metrics", None)
    config.score = _section(score, "score", SCORE_KEYS, where)
    config.gate = _section(data.get("gate", {}), "gate", GATE_KEYS, where)
    config.compare = _section(data.get("compare", {}), "compare", COMPARE_KEYS, where)
    config.metrics = {
        name: _metric(name, table, where) for name, table in data.get("metric", {}).items()
    }
    config.pass_rules = {
        name: {k: table[k] for k in ("threshold", "strict") if k in table}
        for name, table in data.get("metric", {}).items()
        if "threshold" in table or "strict" in table
    }
    if metrics is not None:
        config.score["metrics"] = _metric_list(metrics, config, where)
    _check_from(config, where)
    _check_named(config, where)
    _check_pass_rules(config, where)
    return config


def _check_pass_rules(config: Config, where: _Where) -> None:
    """One pass rule per metric: [score] thresholds / strict and the metric's own table's
    threshold / strict naming the same metric is refused, naming both keys (neither would
    win quietly)."""
    for section_key, names in (
        ("thresholds", config.score.get("thresholds", {})),
        ("strict", config.score.get("strict", [])),
    ):
        for name in names:
            own = config.pass_rules.get(name, {})
            if own:
                table = ".".join(p for p in (where.prefix, f"metric.{name}") if p)
                raise where.error(
                    "score",
                    section_key,
                    f"names {name!r}, whose table [{table}] sets its {' and '.join(own)} "
                    "too; keep one of the two",
                )


def _close(name: str, known: Sequence[str]) -> str:
    """`; did you mean X?` when a known name is close to `name`, else a list of them."""
    match = difflib.get_close_matches(name, list(known), n=1)
    if match:
        return f"; did you mean {match[0]!r}?"
    return f"; known: {', '.join(known)}"


def _section(table: Any, section: str, keys: Mapping[str, Check], where: _Where) -> dict:
    """A table's keys checked against `keys`: unknown keys (a secret's with what to do) and
    values refused one line each; the values as the options hold them."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        say = _sayer(where, section, key)
        if key in SECRETS:
            raise say(
                "a secret never goes in the file: set it in an environment variable and name "
                'that variable with api_key_env = "OPENAI_API_KEY" in [judge]'
            )
        if key not in keys:
            hint = NO_FILE_FORM.get(section, {}).get(key)
            raise say(hint or f"unknown key{_close(key, list(keys))}")
        out[key] = keys[key](value, say)
    return out


def _sayer(where: _Where, section: str, key: str) -> Callable[[str], ConfigError]:
    return lambda message: where.error(section, key, message)


def _metric_list(value: Any, config: Config, where: _Where) -> list[str]:
    """[score] metrics: names of the catalogue, of [metric.NAME] tables, or ["all"]."""
    from ragframe.metrics import REGISTRY, RagasScore

    say = _sayer(where, "score", "metrics")
    if isinstance(value, str) and value.strip().lower() == "all":
        return ["all"]
    names = _strings(value, say)
    known = [*REGISTRY, RagasScore.name, *config.metrics]
    for name in names:
        if name == "g_eval" and name not in config.metrics:
            raise say(G_EVAL_HOW)
        if name.lower() == "all" and len(names) > 1:
            raise say('"all" stands alone: metrics = "all"')
        if name.lower() != "all" and name not in known:
            raise say(f"unknown metric {name!r}{_close(name, known)}")
    if not names:
        raise say("is empty; name at least one metric")
    return names


#: How to give G-Eval its criteria in the file.
G_EVAL_HOW = (
    "G-Eval needs your criteria: define it in ragframe.toml as a table [metric.helpfulness] "
    'with kind = "g_eval" and criteria = "..." (or evaluation_steps = [...]), then name the '
    'table (metrics = ["helpfulness"], or --metrics helpfulness)'
)


def _check_from(config: Config, where: _Where) -> None:
    from ragframe.inputs.traces import FORMATS

    given = config.score.get("from")
    if given is not None and given not in (*FORMATS, "auto"):
        raise where.error(
            "score", "from", f"must be one of {', '.join(FORMATS)}, auto, got {given!r}"
        )


def _check_named(config: Config, where: _Where) -> None:
    """Thresholds, strict modes, gates and the regression check name known metrics (a typo
    is refused with the closest name) and, when the file says what it scores, one of those;
    `metrics = "all"` (the catalogue's metrics, with their defaults) leaves no table unused."""
    from ragframe.metrics import REGISTRY, RagasScore

    known = [*REGISTRY, RagasScore.name, *config.metrics]
    scored = config.scored()
    its = (
        f"its metrics: {', '.join(scored)}"
        if "metrics" in config.score
        else f"with no [score] metrics it scores {', '.join(scored)}"
    )
    for section, key, names in (
        ("score", "thresholds", config.score.get("thresholds", {})),
        ("score", "strict", config.score.get("strict", [])),
        ("gate", "fail_under", config.gate.get("fail_under", {})),
        ("gate", "min_pass_rate", config.gate.get("min_pass_rate", {})),
        ("compare", "fail_if_worse", config.compare.get("fail_if_worse", [])),
    ):
        for name in names:
            if name not in known:
                raise where.error(section, key, f"unknown metric {name!r}{_close(name, known)}")
            if scored != ["all"] and name not in scored:
                raise where.error(
                    section,
                    key,
                    f"names {name!r}, which this file does not score ({its}); add it to "
                    "[score] metrics or remove it",
                )
    unlisted = [name for name in config.metrics if name not in scored]
    if unlisted and scored == ["all"]:
        raise where.error(
            f"metric.{unlisted[0]}",
            None,
            'is defined but metrics = "all" scores the catalogue\'s metrics with their defaults; '
            "list the metrics by name to score it",
        )
    if unlisted:
        raise where.error(
            f"metric.{unlisted[0]}",
            None,
            "is defined but [score] metrics does not list it; add it to metrics, or remove "
            "the table",
        )


def _metric(name: str, table: Any, where: _Where) -> Any:
    """The metric a [metric.NAME] table builds: G-Eval, a rubric, or a catalogue metric with
    options (then NAME is its name)."""
    from ragframe.inputs.columns import ALIASES, CANONICAL
    from ragframe.metrics import REGISTRY, GEval, RubricScore

    section = f"metric.{name}"
    if not isinstance(table, dict):
        raise where.error("", None, f"[{section}] must be a table, got {table!r}")
    if name in CANONICAL or name in ALIASES:
        raise where.error(
            section,
            None,
            f"is named like the input {name!r}: its score column would clash with the log's; "
            f"name the table otherwise (e.g. [metric.{name}_score])",
        )
    kind = table.get("kind", name if name in REGISTRY else None)
    if kind is None:
        raise where.error(
            section, "kind", 'missing: say what it is, kind = "g_eval", "rubric" or a metric name'
        )
    kind = _string(kind, _sayer(where, section, "kind"))
    if kind == "g_eval":
        keys, build = {**METRIC_COMMON, **G_EVAL_KEYS}, GEval
    elif kind == "rubric":
        keys, build = {**METRIC_COMMON, **RUBRIC_KEYS}, RubricScore
    elif kind in REGISTRY:
        if name != kind:
            raise where.error(
                section,
                "kind",
                f"a catalogue metric keeps its own name: name the table [metric.{kind}]",
            )
        keys, build = {**METRIC_COMMON, **_options_of(REGISTRY[kind])}, REGISTRY[kind]
    else:
        known = [*KINDS, *REGISTRY]
        raise where.error(section, "kind", f"unknown kind {kind!r}{_close(kind, known)}")
    values = _section(table, section, keys, where)
    values.pop("kind", None)
    if kind == "g_eval":
        values = _g_eval_values(values, where, section)
        values["name"] = name
    elif kind == "rubric":
        if "rubric" not in values:
            raise where.error(
                section, "rubric", 'missing: give the levels, { 1 = "...", 5 = "..." }'
            )
        values["rubric"] = _rubric_levels(values["rubric"], _sayer(where, section, "rubric"))
        values["name"] = name
    try:
        return build(**values)
    except (ConfigError, TypeError, ValueError) as err:
        key, message = _blamed(str(err), name, table)
        raise where.error(section, key, message) from None


def _blamed(message: str, name: str, table: Mapping[str, Any]) -> tuple[str | None, str]:
    """A constructor's refusal as (the key it names, what to say): "helpfulness: score_range
    must be ..." -> ("score_range", "must be ...")."""
    for lead in (f"{name}: ", f"{name} "):
        if message.startswith(lead):
            message = message[len(lead) :]
    key = next((k for k in table if re.search(rf"\b{re.escape(k)}\b", message)), None)
    if key is not None and message.startswith(key):
        message = message[len(key) :].lstrip(" :")
    return key, message


def _options_of(cls: type) -> dict[str, Check]:
    """A catalogue metric's own keyword options, checked by the type of their default."""
    checks: dict[str, Check] = {}
    for param in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL) or param.name in METRIC_COMMON:
            continue
        checks[param.name] = _like(param.default)
    return checks


def _like(default: Any) -> Check:
    """A check for a value of the default's type (a list for a tuple); no default: any."""
    if isinstance(default, bool):
        return _boolean
    if isinstance(default, int):
        return _whole
    if isinstance(default, float):
        return _number("a finite number", lambda v: True)
    if isinstance(default, tuple):

        def check(value: Any, say: Callable[[str], ConfigError]) -> tuple:
            if not isinstance(value, list) or len(value) != len(default):
                raise say(f"must be a list of {len(default)} values, {_got(value)}")
            return tuple(value)

        return check
    return lambda value, say: value


def _g_eval_values(values: dict[str, Any], where: _Where, section: str) -> dict[str, Any]:
    """G-Eval's keys as GEval takes them: criteria or steps required, the rubric as levels."""
    if "criteria" not in values and "evaluation_steps" not in values:
        raise where.error(
            section,
            "criteria",
            'missing: G-Eval needs criteria = "what a good answer does" (steps are written '
            "from it once per run) or evaluation_steps = [...]",
        )
    if "score_range" in values:
        values["score_range"] = _range(values["score_range"], _sayer(where, section, "score_range"))
    if "rubric" in values:
        values["rubric"] = _g_eval_rubric(values["rubric"], _sayer(where, section, "rubric"))
    return values


def _range(value: Any, say: Callable[[str], ConfigError]) -> tuple[int, int]:
    ok = isinstance(value, list) and len(value) == 2
    if not ok or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise say(f"must be two whole numbers [low, high], like [1, 5], {_got(value)}")
    return value[0], value[1]


def _g_eval_rubric(value: Any, say: Callable[[str], ConfigError]) -> list[Any]:
    """`[{ low = 1, high = 2, expected_outcome = "..." }, ...]` -> RubricLevel list."""
    from ragframe.metrics import RubricLevel

    if not isinstance(value, list):
        raise say(f"must be a list of {{ low, high, expected_outcome }} tables, {_got(value)}")
    levels = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"low", "high", "expected_outcome"}:
            raise say(
                'each level is a table { low = 1, high = 2, expected_outcome = "..." }, '
                f"{_got(item)}"
            )
        low, high = _range([item["low"], item["high"]], say)
        levels.append(RubricLevel(low, high, _string(item["expected_outcome"], say)))
    return levels


def _rubric_levels(value: Any, say: Callable[[str], ConfigError]) -> dict[int, str]:
    """`{ 1 = "...", 5 = "..." }` (TOML keys are strings) -> {1: "...", 5: "..."}."""
    if not isinstance(value, dict):
        raise say(
            'must be a table of level = "description", like { 1 = "...", 5 = "..." }, '
            + _got(value)
        )
    levels: dict[int, str] = {}
    for key, text in value.items():
        if not re.fullmatch(r"-?\d+", key.strip()):
            raise say(f"levels are whole numbers, got {key!r}")
        levels[int(key)] = _string(text, lambda m, k=key: say(f"{k}: {m}"))
    return levels


def wanted(args: argparse.Namespace) -> bool:
    """Whether this command reads the file (a reader, without --no-config)."""
    return args.command in READERS and not getattr(args, "no_config", False)


def apply(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]) -> Any:
    """Find, read and check the file for `args.command`; when there is one, its values become
    the subcommand's defaults and `argv` is parsed again (the command line wins). Says on
    stderr which file was used. Returns the arguments to run with."""
    if getattr(args, "config_file", None) is not None and getattr(args, "no_config", False):
        raise ConfigError(
            f"--config {args.config_file} and --no-config contradict each other: drop one"
        )
    if not wanted(args):
        return args
    found = find_config(getattr(args, "config_file", None))
    if found is None:
        return args
    config = load_config(*found)
    sub = _subparser(parser, args.command)
    sub.set_defaults(**_declared(sub, config.defaults(args.command)), config=config)
    args = parser.parse_args(argv)
    if getattr(args, "config_no_cache", False) and isinstance(getattr(args, "cache", None), str):
        args.no_cache = False  # --cache FILE on the command line turns the cache back on
    _check_needs(config, args)
    print(f"ragframe: using {config.shown}", file=sys.stderr)
    return args


#: Keys that only mean something beside another, by command: (section, the keys, what they
#: need: the dests of which one must be set, what to add to the file).
_NEEDS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], str]] = {
    "score": (
        "gate",
        ("junit", "json", "markdown"),
        ("fail_under", "min_pass_rate"),
        "writes the gates' results, but no gate is given: add fail_under = { metric = mean } "
        "or min_pass_rate = { metric = rate } to [gate] (or --fail-under on the command line)",
    ),
    "compare": (
        "compare",
        ("junit", "markdown", "margin", "ignore_failed", "fail_if_unknown"),
        ("fail_if_worse",),
        "is for the regression check, but no metric is checked: add fail_if_worse = "
        '["metric"] to [compare] (or --fail-if-worse METRIC on the command line)',
    ),
}
_NEEDS["gate"] = _NEEDS["score"]


def _check_needs(config: Config, args: argparse.Namespace) -> None:
    """A key of the file that needs another one nobody gave (a [gate] junit file with no
    gate, a [compare] margin with no fail_if_worse) is refused naming the file's key, not a
    command-line option the user never typed."""
    need = _NEEDS.get(args.command)
    if need is None:
        return
    section, keys, needed, message = need
    if any(getattr(args, dest, None) for dest in needed):
        return
    table = getattr(config, section)
    defaults = config.defaults(args.command)
    for key in keys:
        dest = CI_FILES.get(key, key) if section == "gate" else key
        value = getattr(args, dest, None)
        if key in table and dest in defaults and value and value == defaults[dest]:
            where = config.where or _Where(config.label, "")
            raise where.error(section, key, message)


def _declared(sub: argparse.ArgumentParser, defaults: dict[str, Any]) -> dict[str, Any]:
    """The defaults whose options `sub` declares: a result file it has no option for is left
    to the subcommand that has (`ragframe gate`); any other undeclared one is a bug here."""
    dests = {action.dest for action in sub._actions}
    missing = [k for k in defaults if k not in dests and k not in INTERNAL]
    unknown = [k for k in missing if k not in CI_FILES.values()]
    if unknown:  # pragma: no cover - a key mapped to an option the subcommand lacks
        raise RuntimeError(f"ragframe.toml keys mapped to no option of {sub.prog}: {unknown}")
    return {k: v for k, v in defaults.items() if k not in missing}


def _table(config: Config) -> str:
    return " [tool.ragframe]" if config.path.name == "pyproject.toml" else ""


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise KeyError(name)  # pragma: no cover - every reader is a subcommand


def trim_to(args: argparse.Namespace, scored: Sequence[str]) -> None:
    """Drop the file's thresholds and strict modes on metrics the run does not score (when
    --metrics on the command line chose fewer than the file): they are settings of those
    metrics, not requests. A gate of the file is never dropped quietly: one on a metric the
    run does not score is refused, naming the file and what to do."""
    config = getattr(args, "config", None)
    if config is None:
        return
    defaults = config.defaults(args.command)
    for key in ("fail_under", "min_pass_rate"):
        gated = config.gate.get(key, {})
        if key in defaults and getattr(args, key) == defaults[key]:
            missing = [name for name in gated if name not in scored]
            if missing:
                where = config.where or _Where(config.label, "")
                raise where.error(
                    "gate",
                    key,
                    f"names {missing[0]!r}, which this run does not score (--metrics "
                    f"{','.join(scored)}); add it to --metrics, or give "
                    f"--{key.replace('_', '-')} on the command line",
                )
    thresholds = config.score.get("thresholds", {})
    if "threshold" in defaults and args.threshold == defaults["threshold"]:
        args.threshold = _pairs({k: v for k, v in thresholds.items() if k in scored}) or None
    if "strict" in defaults and args.strict == defaults["strict"]:
        kept = [name for name in config.score["strict"] if name in scored]
        args.strict = ",".join(kept) or None


def config_metrics(args: argparse.Namespace) -> dict[str, Any]:
    """The metrics the file builds, by name (none without a file)."""
    config = getattr(args, "config", None)
    return dict(config.metrics) if config is not None else {}


def metric_table(args: argparse.Namespace, name: str) -> str:
    """How messages name the table that builds metric `name`: `[metric.helpfulness] of
    ragframe.toml` (`[tool.ragframe.metric.helpfulness] of pyproject.toml`)."""
    config = getattr(args, "config", None)
    if config is None:
        return f"[metric.{name}]"
    prefix = config.where.prefix if config.where is not None else ""
    table = ".".join(p for p in (prefix, f"metric.{name}") if p)
    return f"[{table}] of {config.label}"


def judge_extras(args: argparse.Namespace) -> dict[str, Any]:
    """The Judge keywords the file gives that have no flag: seed, max_attempts, and the key
    read from the environment variable api_key_env names."""
    extra = dict(getattr(args, "config_judge", None) or {})
    name = extra.pop("api_key_env", None)
    if name is not None:
        key = os.environ.get(name, "").strip()
        if not key:
            config = getattr(args, "config", None)
            where = config.label if config is not None else CONFIG_NAME
            raise ConfigError(
                f"{where}: [judge] api_key_env: the environment variable {name} is not set; "
                "export it (in CI, from the job's secrets)"
            )
        extra["api_key"] = key
    return extra
