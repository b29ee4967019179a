"""The candidate set, read from what `-f` names: a directory of files, or Kubernetes YAML.

In YAML, every ConfigMap and Secret document (also inside a `kind: List`) gives its keys as files:
a ConfigMap's `data` (text) and `binaryData` (base64); a Secret's `data` (base64) and `stringData`
(text). A Secret's files are key material: their contents are never shown (each Secret is its own
"secret source" for the diff). Other kinds are skipped, as `kubectl kustomize` prints them too.
A name given twice is a problem of the set (config-sync refuses it the same way), not a choice.
"""

from __future__ import annotations

import base64
import binascii
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sidecars.configsync.fileset.sources import FileEntry, FileSet, read_source
from sidecars.runtime.settings import ConfigError

KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # a ConfigMap or Secret key, as the API server allows it
MAX_INPUT_BYTES = 64 * 1024 * 1024  # a rendered kustomization, with room; more is no config


@dataclass(frozen=True, slots=True)
class Candidate:
    files: FileSet
    secret_sources: frozenset[Path]  # whose files are key material
    origin: str  # what was read, for the answer


def read_candidate(where: str, max_file_bytes: int, select: Iterable[str] = ()) -> Candidate:
    """The set `where` names (`-` is stdin); ConfigError when it cannot be read as one."""
    if where != "-" and Path(where).is_dir():
        try:
            entries, problems = read_source(Path(where), max_file_bytes)
        except OSError as exc:
            raise ConfigError(f"-f {where}: {exc.strerror or exc}") from None
        return Candidate(FileSet.build(entries, problems), frozenset(), where)
    try:
        if where == "-":
            text = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(where, "rb") as f:
                text = f.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"-f {where}: {exc.strerror or exc}") from None
    if len(text) > MAX_INPUT_BYTES:
        raise ConfigError(f"-f {where}: over {MAX_INPUT_BYTES} bytes")
    return from_yaml(text, "stdin" if where == "-" else where, max_file_bytes, frozenset(select))


def _documents(text: bytes, origin: str) -> list[dict[str, Any]]:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ConfigError(f"{origin}: not YAML: {exc}") from None
    out: list[dict[str, Any]] = []
    for d in docs:
        if not isinstance(d, dict):
            raise ConfigError(
                f"{origin}: a document is not a Kubernetes object (a {type(d).__name__}); -f takes "
                "ConfigMap/Secret YAML, or a directory of the files themselves"
            )
        if d.get("kind") == "List" and isinstance(d.get("items"), list):
            out += [i for i in d["items"] if isinstance(i, dict)]
        else:
            out.append(d)
    return out


def _values(obj: dict[str, Any], field: str, where: str) -> dict[str, str]:
    got = obj.get(field) or {}
    if not isinstance(got, dict) or not all(isinstance(v, str) for v in got.values()):
        raise ConfigError(f"{where}: {field} must map keys to strings")
    for key in got:
        if not isinstance(key, str) or not KEY.match(key) or key.startswith(".."):
            raise ConfigError(f"{where}: {key!r} is not a valid key")
    return got


def _decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{what}: not base64") from None


def from_yaml(
    text: bytes, origin: str, max_file_bytes: int, select: frozenset[str] = frozenset()
) -> Candidate:
    entries: dict[str, FileEntry] = {}
    problems: list[str] = []
    secrets: set[Path] = set()
    for obj in _documents(text, origin):
        kind = obj.get("kind")
        if kind not in ("ConfigMap", "Secret"):
            continue
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{origin}: a {kind} without metadata.name")
        if select and name not in select:
            continue
        where = f"{origin}: {kind} {name}"
        source = Path(f"{kind.lower()}/{name}")
        found: list[tuple[str, bytes]] = []
        if kind == "ConfigMap":
            found += [(k, v.encode()) for k, v in _values(obj, "data", where).items()]
            binary = _values(obj, "binaryData", where)
            found += [(k, _decode(v, f"{where} binaryData {k}")) for k, v in binary.items()]
            mode = 0o644
        else:
            secrets.add(source)
            # stringData is written over data, key by key, as the API server does
            merged = {k: _decode(v, f"{where} data {k}") for k, v in _values(obj, "data", where).items()}
            merged.update((k, v.encode()) for k, v in _values(obj, "stringData", where).items())
            found += merged.items()
            mode = 0o600  # as config-sync's Secret volume gives them: key material
        for key, data in found:
            if key in entries:
                problems.append(f"{key} is in both {entries[key].source} and {source}")
                continue
            entries[key] = FileEntry(key, data[: max_file_bytes + 1], mode, len(data), source)
    if not entries and not problems:
        wanted = f" named {', '.join(sorted(select))}" if select else ""
        raise ConfigError(f"{origin}: no ConfigMap or Secret{wanted} with any key")
    return Candidate(FileSet.build(entries.values(), problems), frozenset(secrets), origin)
