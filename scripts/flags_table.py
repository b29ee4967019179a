"""Print the Markdown reference of every subcommand's flags and environment variables, from the
parser itself, so the README cannot drift from the code (a test compares them). `--write` puts it,
and the metrics reference (metrics_table.py), into README.md."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sidecars.cli import build_parser
from sidecars.runtime.settings import env_name

BEGIN, END = "<!-- flags:begin (scripts/flags_table.py --write) -->", "<!-- flags:end -->"


def flags_markdown() -> str:
    for var in [v for v in os.environ if v.startswith("SIDECARS_")]:
        del os.environ[var]  # the reference shows the built-in defaults, not this shell's
    parser, commands = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out: list[str] = []
    for name in commands:
        p = sub.choices[name]
        rows = []
        for action in p._actions:
            if not action.option_strings or action.dest == "help":
                continue
            flag = max(action.option_strings, key=len)
            positional_env = (
                env_name(flag) if flag.startswith("--") and "[env " in (action.help or "") else ""
            )
            default = "" if action.default in (None, argparse.SUPPRESS, [], False) else f"`{action.default}`"
            required = "yes" if action.required else ""
            help_text = (action.help or "").split(" [env ")[0].replace("|", "\\|")
            if action.choices:
                help_text += f" (one of: {', '.join(map(str, action.choices))})"
            rows.append(
                f"| `{flag}` | {f'`{positional_env}`' if positional_env else ''} | {default} | "
                f"{required} | {help_text} |"
            )
        out.append(f"### `slurm-sidecars {name}`\n\n{p.description or ''}\n")
        out.append("| flag | environment | default | required | meaning |\n|---|---|---|---|---|")
        out.extend(rows)
        out.append("")
    return "\n".join(out)


def replace_section(text: str, begin: str, end: str, body: str) -> str:
    head, found, rest = text.partition(begin)
    if not found:
        raise SystemExit(f"README has no {begin!r} marker")
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body}{end}{tail}"


def write_readme(path: Path) -> None:
    from metrics_table import BEGIN as M_BEGIN
    from metrics_table import END as M_END
    from metrics_table import metrics_markdown

    text = replace_section(path.read_text(), BEGIN, END, flags_markdown())
    path.write_text(replace_section(text, M_BEGIN, M_END, metrics_markdown()))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_readme(Path(__file__).parent.parent / "README.md")
    else:
        sys.stdout.write(flags_markdown())
