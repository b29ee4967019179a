"""Settings stated once: each field of a role's frozen dataclass declares its flag, environment
variable (`SIDECARS_<FLAG>`), help text, unit and converter beside its default (`setting()`), and
the argparse parser (`add_flags`), the conversion (`values`) and the docs (`scripts/flags_table.py`)
are made from that one declaration. A bad value raises `ConfigError`, which `main()` turns into
exit 2 with one line.

Booleans are spelled `true|false`: the spelling of JSON, of Kubernetes' own fields and of most
tools' flags, so a value reads the same in a manifest's args, its env and our `/status`. The older
`on|off` and `yes|no` are still accepted, each with a warning naming the new spelling. A renamed
flag (one given its unit) keeps its old name as an alias that also warns.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, dataclass_transform

import structlog

from sidecars.runtime.converters import (
    ADDRESS,
    BOOL,
    DIR,
    PATH,
    SHELL_WORDS,
    TEXT,
    TOKEN_FILE,
    URL,
    ConfigError,
    Conv,
    choice,
    http_url,
    number,
    parse_addr,
    positive,
    read_token,
    seconds,
)

__all__ = [  # the converters too: a role declares its settings with one import
    "ADDRESS",
    "BOOL",
    "DIR",
    "PATH",
    "SHELL_WORDS",
    "TEXT",
    "TOKEN_FILE",
    "URL",
    "ConfigError",
    "Conv",
    "Flag",
    "add_flag",
    "add_flags",
    "choice",
    "convert",
    "declared",
    "duration",
    "env_name",
    "flags_of",
    "http_url",
    "number",
    "parse_addr",
    "positive",
    "read_token",
    "seconds",
    "setting",
    "settings_from",
    "settings_of",
    "values",
]

SETTING = "sidecars.setting"  # the field metadata key of a declaration
GROUP = "sidecars.settings_group"  # a field holding a nested settings dataclass
T = TypeVar("T")


def env_name(flag: str) -> str:
    return "SIDECARS_" + flag.lstrip("-").upper().replace("-", "_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Flag:
    """One flag: everything the parser, the conversion and the docs need."""

    name: str
    help: str
    conv: Conv
    default: Any = None  # the value when not given (None: none); shown by `conv.show`
    required: bool = False
    multiple: bool = False  # repeatable; comma-separated in the environment
    aliases: tuple[str, ...] = ()  # old names, still accepted, with a warning
    short: str = ""  # a one-letter spelling (kubectl's `-f`): no warning, no variable of its own
    switch: bool = False  # given alone (`--tour`) it means true; `--tour=false` is still accepted
    path: str = ""  # the field it fills, dotted through nested groups: `recycle.grace_seconds`

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")

    @property
    def env(self) -> str:
        return env_name(self.name)

    def shown_default(self) -> str:
        if self.default is None or self.default in ((), []):
            return ""
        return self.conv.show(self.default)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Decl:
    help: str
    flag: str
    conv: Conv
    required: bool
    multiple: bool
    aliases: tuple[str, ...]
    short: str
    switch: bool


def setting(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Any = dataclasses.MISSING,
    help: str,
    conv: Conv | None = None,
    flag: str = "",
    required: bool = False,
    multiple: bool = False,
    aliases: Iterable[str] = (),
    short: str = "",
    switch: bool = False,
) -> Any:
    """A dataclass field that is also a flag: `--<field-name>` unless `flag` names it otherwise.
    Without a default the field must be given (or its role derives it: see `values`). `short` is
    a one-letter spelling beside the name; a `switch` is a BOOL that, given alone, means true."""
    if switch and conv not in (None, BOOL):
        raise TypeError("a switch is a BOOL setting")
    decl = _Decl(
        help=help,
        flag=flag,
        conv=conv or (BOOL if switch else TEXT),
        required=required,
        multiple=multiple,
        aliases=tuple(aliases),
        short=short,
        switch=switch,
    )
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata={SETTING: decl})
    return dataclasses.field(default=default, metadata={SETTING: decl})


def duration(default: float, help: str, *, flag: str = "") -> Any:
    """A `setting()` of seconds (> 0), the kind most settings are."""
    return setting(default=default, flag=flag, conv=seconds(), help=help)


@dataclass(frozen=True, slots=True)
class _Group:
    cls: type[Any]
    prefix: str  # put before each of its fields' flag names, unless a field names its flag itself


def settings_of(*, default_factory: type[Any], prefix: str = "") -> Any:
    """A field holding a nested settings dataclass (its fields' flags are the role's flags too):
    a group of settings handed whole to the part that uses them. With `prefix` ("recycle"), its
    field `grace_seconds` is the flag `--recycle-grace-seconds`; a field's own `flag=` wins."""
    group = _Group(default_factory, prefix.replace("_", "-") + "-" if prefix else "")
    return dataclasses.field(default_factory=default_factory, metadata={GROUP: group})


@dataclass_transform(frozen_default=True, field_specifiers=(setting, settings_of, dataclasses.field))
def declared(*, kw_only: bool = False) -> Callable[[type[T]], type[T]]:
    """A role's settings: a frozen dataclass whose `setting()` fields are its flags."""

    def make(cls: type[T]) -> type[T]:
        return dataclass(frozen=True, slots=True, kw_only=kw_only)(cls)

    return make


def flags_of(cls: type, *, _prefix: str = "", _path: str = "") -> list[Flag]:
    """Every flag declared by `cls`'s fields (and its nested groups'), in field order."""
    out: list[Flag] = []
    for f in dataclasses.fields(cls):
        if GROUP in f.metadata:
            group: _Group = f.metadata[GROUP]
            out.extend(flags_of(group.cls, _prefix=_prefix + group.prefix, _path=f"{_path}{f.name}."))
        elif SETTING in f.metadata:
            out.append(_flag(f, _prefix, _path))
    return out


def _flag(field: dataclasses.Field[Any], prefix: str = "", path: str = "") -> Flag:
    d: _Decl = field.metadata[SETTING]
    return Flag(
        name=d.flag or "--" + prefix + field.name.replace("_", "-"),
        path=path + field.name,
        help=d.help,
        conv=d.conv,
        default=None if field.default is dataclasses.MISSING else field.default,
        required=d.required,
        multiple=d.multiple,
        aliases=d.aliases,
        short=d.short,
        switch=d.switch,
    )


class _FlagAction(argparse.Action):
    """Stores a flag's text as given; carries its `Flag` (for the docs), notes an old name, and
    lets the first value of a repeatable flag replace the environment's list instead of adding
    to it (a flag beats its variable, for lists too)."""

    def __init__(self, option_strings: list[str], dest: str, *, sidecars_flag: Flag, **kw: Any) -> None:
        super().__init__(option_strings, dest, **kw)
        self.sidecars_flag = sidecars_flag

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        f = self.sidecars_flag
        if option_string in f.aliases:
            _old_names(namespace)[f.name] = option_string
        if not f.multiple:
            setattr(namespace, self.dest, values)
            return
        seen = f"_{self.dest}_given"
        current = getattr(namespace, self.dest) if getattr(namespace, seen, False) else []
        setattr(namespace, self.dest, [*current, values])
        setattr(namespace, seen, True)


def _old_names(namespace: argparse.Namespace) -> dict[str, str]:
    if not hasattr(namespace, "_sidecars_old_names"):
        namespace._sidecars_old_names = {}
    old: dict[str, str] = namespace._sidecars_old_names
    return old


def add_flag(parser: argparse.ArgumentParser, f: Flag, env: Mapping[str, str] | None = None) -> None:
    """`f` on `parser`, its default the text of `SIDECARS_<FLAG>` (or of an old name's variable)."""
    env = os.environ if env is None else env
    text = next((env[v] for v in (f.env, *map(env_name, f.aliases)) if v in env), None)
    default: Any = None
    if text is not None:
        default = [v for v in text.split(",") if v] if f.multiple else text
        old = next((a for a in f.aliases if env_name(a) in env and f.env not in env), None)
        if old is not None:
            olds = parser.get_default("_sidecars_old_env") or {}
            parser.set_defaults(_sidecars_old_env={**olds, f.name: env_name(old)})
    elif f.multiple:
        default = []
    shown = f.shown_default()
    notes = [f"default: {shown}{' ' + f.conv.unit if f.conv.unit else ''}"] if shown else []
    help_text = f.help + (f" ({'; '.join(notes)})" if notes else "")
    # a flag that is missing or wrong is one line from `values`, not argparse's usage block
    parser.add_argument(
        *([f.short] if f.short else []),
        f.name,
        *f.aliases,
        dest=f.dest,
        default=default,
        metavar=f.conv.metavar or None,
        nargs="?" if f.switch else None,
        const="true" if f.switch else None,
        help=f"{help_text} [env {f.env}]",
        action=_FlagAction,
        sidecars_flag=f,
    )


def add_flags(
    parser: argparse.ArgumentParser,
    *sources: type,
    env: Mapping[str, str] | None = None,
    note: str = "",
) -> None:
    """The flags of settings dataclasses, in the order given (the one way a flag is declared: a
    `setting()` field); `note` leads each one's help (a role told how its value must match
    another's)."""
    for source in sources:
        for f in flags_of(source):
            add_flag(parser, dataclasses.replace(f, help=note + f.help) if note else f, env)


def convert(f: Flag, args: argparse.Namespace) -> Any:
    """`f`'s value from parsed `args`: converted when given (argv or environment), else its
    default (None when it has none); ConfigError when it is required and missing."""
    text = getattr(args, f.dest, None)
    # an empty value of an optional setting that has no default is no value (`SIDECARS_X=` unsets)
    unset = text == "" and f.default is None and not f.required
    if text is None or unset or (f.multiple and not text):
        if f.required:
            raise ConfigError(f"{f.name} is required")
        return f.default
    old = _old_names(args).get(f.name) or getattr(args, "_sidecars_old_env", {}).get(f.name)
    if old:
        _warn(f, old_name=old, write=f.name if old.startswith("--") else f.env)
    if f.multiple:
        return tuple(_one(f, str(t)) for t in text)
    return _one(f, str(text))


def _one(f: Flag, text: str) -> Any:
    key = text.strip().lower()
    # an old spelling, or a choice in other letters (`True`, `ON`): taken, and said
    new = f.conv.old.get(key) or (key if key in f.conv.choices and key != text else None)
    if new is not None:
        _warn(f, given=text, write=new)
        text = new
    return f.conv.parse(text, f.name)


def _warn(f: Flag, **kw: str) -> None:
    structlog.get_logger("sidecars.settings").warning("setting_old_spelling", flag=f.name, **kw)


def values(cls: type, args: argparse.Namespace, *, _prefix: str = "") -> dict[str, Any]:
    """`cls`'s declared fields from `args`: those given, converted, and nested groups built; a
    field left out keeps its dataclass default (or is for the role to derive)."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if GROUP in field.metadata:
            group: _Group = field.metadata[GROUP]
            out[field.name] = group.cls(**values(group.cls, args, _prefix=_prefix + group.prefix))
        elif SETTING in field.metadata:
            f = _flag(field, _prefix)
            if getattr(args, f.dest, None) not in (None, []) or f.required:
                out[field.name] = convert(f, args)
    return out


def settings_from(cls: type[T], args: argparse.Namespace) -> T:
    """`cls` built from `args` alone: for a role whose every field is a declared flag."""
    return cls(**values(cls, args))
