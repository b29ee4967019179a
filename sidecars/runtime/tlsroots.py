"""The system's CA roots, loaded only by a process that uses them.

aiohttp builds two client TLS contexts when it is imported, and each loads the system's whole CA
bundle (about 2 MB resident here, in every process, used or not). A role that runs in every pod
(the worker agent, the exec probe) imports its modules under `roots_deferred()`: while it lasts,
OpenSSL's default CA file and directory (`SSL_CERT_FILE`, `SSL_CERT_DIR`, read when a context loads
its defaults) name nothing, so those contexts hold no roots. Such a role never hands aiohttp
`ssl=True` for an https URL: it passes `system_roots()` (or its --ca-file context) instead, built
when a connection needs it. A context made after the import (Kubernetes' client, ours) loads the
system's roots as usual: the environment is put back as it was.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import Iterator

_DEFAULTS = ("SSL_CERT_FILE", "SSL_CERT_DIR")
NOTHING = "/nonexistent/slurm-sidecars-no-ca-roots"  # a path OpenSSL finds nothing at


@contextlib.contextmanager
def roots_deferred() -> Iterator[None]:
    """Contexts built inside load no system roots (aiohttp's import-time ones)."""
    saved = {name: os.environ.get(name) for name in _DEFAULTS}
    os.environ.update(dict.fromkeys(_DEFAULTS, NOTHING))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def system_roots() -> ssl.SSLContext:
    """A client context verifying with the system's roots, as aiohttp's default would."""
    return ssl.create_default_context()


def client_context(url: str, ca: ssl.SSLContext | None) -> ssl.SSLContext | bool:
    """What to pass aiohttp as `ssl=` for `url`: the given CA's context, the system's roots for
    https, and for plain http True (unused: no roots are loaded for it)."""
    if ca is not None:
        return ca
    return system_roots() if url.lower().startswith("https:") else True
