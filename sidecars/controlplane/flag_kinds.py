"""How the control plane's own kinds of flag text become values (see sidecars.runtime.converters):
each says in one line what it expects when the text is wrong."""

from __future__ import annotations

import re

from sidecars.runtime.settings import ConfigError, Conv, choice


def _job_read(text: str, what: str) -> bool:
    return bool(choice("brief", "full").parse(text, what) == "brief")


def _kubernetes(text: str, what: str) -> bool:
    return bool(choice("auto", "off").parse(text, what) == "auto")


def _taint_keys(text: str, what: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    for key in keys:
        name = key.rpartition("/")[2]
        if not name or len(key) > 316 or any(c.isspace() or c in "=:," for c in key):
            raise ConfigError(f"{what}: not a taint key: {key!r}")
    return keys


def _signals(text: str, what: str) -> tuple[tuple[str, str], ...]:
    """NAME[=VALUE],...: a Node condition type and the status that is a fault (default True), or a
    taint key and the value that is a fault (default: any)."""
    out: list[tuple[str, str]] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, _, value = (part.strip() for part in item.partition("="))
        if not name or len(name) > 316 or any(c.isspace() or c in ":,=" for c in name + value):
            raise ConfigError(f"{what}: not NAME or NAME=VALUE: {item!r}")
        out.append((name, value))
    if len({n for n, _ in out}) != len(out):
        raise ConfigError(f"{what}: a name given twice: {text!r}")
    return tuple(out)


def _annotation_key(text: str, what: str) -> str:
    key = (text or "").strip()
    prefix, _, name = key.rpartition("/")
    if not name or len(name) > 63 or len(prefix) > 253 or any(c.isspace() or c in "=:," for c in key):
        raise ConfigError(f"{what}: not an annotation key: {text!r}")
    return key


def _slinky_mode(text: str, what: str) -> bool | None:
    return {"auto": None, "true": True, "false": False}[choice("auto", "true", "false").parse(text, what)]


def _audience(text: str, what: str) -> str:
    audience = text.strip()
    if len(audience) > 253 or any(c.isspace() for c in audience):
        raise ConfigError(f"{what}: not an audience: {text!r}")
    return audience


def _configmap(text: str, what: str) -> str:
    if text and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", text):
        raise ConfigError(f"{what}: not a ConfigMap name: {text!r}")
    return text


def _workload(text: str, what: str) -> tuple[str, str] | None:
    kind, _, name = text.strip().partition("/")
    kinds = {"deployment": "Deployment", "statefulset": "StatefulSet"}
    if not text.strip():
        return None
    if kind.lower() not in kinds or not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", name):
        raise ConfigError(f"{what}: not deployment/NAME or statefulset/NAME: {text!r}")
    return kinds[kind.lower()], name


def _object_name(text: str, what: str) -> str:
    if text and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", text):
        raise ConfigError(f"{what}: not a Kubernetes name: {text!r}")
    return text


def _image(text: str, what: str) -> str:
    if text and (any(c.isspace() for c in text) or len(text) > 512):
        raise ConfigError(f"{what}: not an image reference: {text!r}")
    return text


def _budget(text: str, what: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*|([1-9][0-9]?|100)%", text.strip()):
        raise ConfigError(f"{what}: a number of workers or a percentage, e.g. 2 or 25%: {text!r}")
    return text.strip()


WORKLOAD = Conv(_workload, lambda w: f"{w[0].lower()}/{w[1]}" if w else "", "KIND/NAME")
OBJECT_NAME = Conv(_object_name, str, "NAME")
IMAGE = Conv(_image, str, "IMAGE")
BUDGET = Conv(_budget, str, "N|N%")
JOB_READ = Conv(
    _job_read, lambda brief: "brief" if brief else "full", "brief|full", choices=("brief", "full")
)
KUBERNETES = Conv(_kubernetes, lambda on: "auto" if on else "off", "auto|off", choices=("auto", "off"))
SLINKY_MODE = Conv(
    _slinky_mode,
    lambda on: "auto" if on is None else "true" if on else "false",
    "auto|true|false",
    choices=("auto", "true", "false"),
)
TAINT_KEYS = Conv(_taint_keys, ",".join, "KEY,...")
SIGNALS = Conv(_signals, lambda pairs: ",".join(f"{n}={v}" if v else n for n, v in pairs), "NAME[=VALUE],...")
ANNOTATION_KEY = Conv(_annotation_key, str, "KEY")
AUDIENCE_NAME = Conv(_audience)
CONFIGMAP = Conv(_configmap)
