"""Where a whole-cluster upgrade's status is kept, so that a control plane restarted, or a new Lease
holder, finds an upgrade that was under way: in Kubernetes a ConfigMap (written by the Lease holder
only: the client's fence), in the dev cluster a file beside the cluster's state.

The status is one JSON document (`ClusterUpgradeStatus.data()`); it names no secret (paths, releases,
images, job ids), so a ConfigMap is its place and not a Secret. But whoever may write that ConfigMap
must not choose what a resumed upgrade does (the image slurmctld is rolled back to, the copy it is
restored from): the ConfigMap store signs the document (HMAC-SHA256, key `SIGNATURE_KEY`) with a key
derived from the control plane's operator token, and a document whose signature does not match is
not read (said, nothing resumed over it). A rotated token makes a kept status unreadable: finish or
delete it first."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any, Protocol

from sidecars.kube import KubeClient

CONFIG_MAP = "slurm-sidecars-cluster-upgrade"
KEY = "status.json"
SIGNATURE_KEY = "status.json.hmac-sha256"  # hex; beside the document in the same ConfigMap
MAX_BYTES = 900 * 1024  # under a ConfigMap's 1 MiB, with room for its metadata


class StatusStore(Protocol):
    """Keeps one document; `load` is None when none was ever kept. Both raise when they could not."""

    where: str  # what an operator looks at (a ConfigMap's name, a file's path)

    async def load(self) -> dict[str, Any] | None: ...

    async def save(self, data: dict[str, Any]) -> None: ...


def _decode(text: str, where: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{where} holds no JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where} holds {type(data).__name__}, not a status")
    return data


def _encode(data: dict[str, Any], where: str) -> str:
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > MAX_BYTES:
        raise ValueError(f"the upgrade's status is {len(text.encode())} bytes: more than {where} may hold")
    return text


def signing_key(token: str) -> bytes:
    """The key a status is signed with: the operator token's, never the token itself."""
    return hashlib.sha256(b"slurm-sidecars cluster-upgrade status\0" + token.encode()).digest()


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


class ConfigMapStore:
    def __init__(self, kube: KubeClient, namespace: str, key: bytes, name: str = CONFIG_MAP) -> None:
        self._kube, self._namespace, self._name, self._key = kube, namespace, name, key
        self.where = f"ConfigMap {namespace}/{name}"

    async def load(self) -> dict[str, Any] | None:
        data = await self._kube.get_config_map(self._namespace, self._name)
        if not data:
            return None
        if KEY not in data:
            raise ValueError(f"{self.where} has no {KEY}")
        given = data.get(SIGNATURE_KEY, "")
        if not hmac.compare_digest(given, _sign(self._key, data[KEY])):
            raise ValueError(
                f"{self.where} is not signed by this control plane (its operator token): written by "
                "someone else, or before a token rotation; not resumed (delete it to start afresh)"
            )
        return _decode(data[KEY], self.where)

    async def save(self, data: dict[str, Any]) -> None:
        text = _encode(data, self.where)
        await self._kube.put_config_map(
            self._namespace, self._name, {KEY: text, SIGNATURE_KEY: _sign(self._key, text)}
        )


class FileStore:
    """A file (0600, replaced atomically: a reader never sees half a status)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    async def load(self) -> dict[str, Any] | None:
        try:
            text = await asyncio.to_thread(self.path.read_text)
        except FileNotFoundError:
            return None
        return _decode(text, self.where)

    async def save(self, data: dict[str, Any]) -> None:
        await asyncio.to_thread(self._write, _encode(data, self.where))

    def _write(self, text: str) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
