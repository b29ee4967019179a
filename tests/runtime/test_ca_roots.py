"""A role that runs in every pod loads the system's CA roots only when it uses them (aiohttp would
load the whole bundle twice at import, about 2 MB in each process), and still verifies an https
server with them when it does: the exec probe against an https daemon with no --ca-file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web

from sidecars.cli import self_argv
from sidecars.runtime import http, process
from tests.runtime.test_server_bounds import Certs, certs  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(60)

# after the role's modules are imported as `slurm-sidecars ROLE` imports them: the CA roots held by
# every TLS context then alive, and those of a context made afterwards (the environment put back)
COUNT = (
    "import gc, ssl, sys\nfrom sidecars.cli import build_parser\nbuild_parser(only=sys.argv[1])\n"
    "held = sum(o.cert_store_stats()['x509_ca'] for o in gc.get_objects() if isinstance(o, ssl.SSLContext))\n"
    "print(held, ssl.create_default_context().cert_store_stats()['x509_ca'], 'aiohttp' in sys.modules)\n"
)


@pytest.mark.parametrize("role", ["worker", "probe"])
def test_a_per_pod_role_imports_without_the_ca_roots(role: str, certs: Certs) -> None:  # noqa: F811
    env = {**os.environ, "SSL_CERT_FILE": str(certs.ca)}  # this process's "system roots": one CA
    out = subprocess.run(
        [sys.executable, "-c", COUNT, role], env=env, capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert out.split() == ["0", "1", "True"], out  # aiohttp loaded, no root held; later ones get them


async def test_the_probe_verifies_an_https_daemon_with_the_system_roots(certs: Certs) -> None:  # noqa: F811
    async def livez(_: web.Request) -> web.Response:
        return web.json_response({"checks": {}})

    app = web.Application()
    app.router.add_get("/livez", livez)
    async with http.serve(app, "127.0.0.1", 0, tls=certs.server()) as port:

        async def probe(roots: Path) -> tuple[int, str]:
            argv = self_argv("probe", "livez", "--url", f"https://127.0.0.1:{port}")
            done = await process.run(
                argv, timeout=30, env={**os.environ, "SSL_CERT_FILE": str(roots)}, merge_stderr=True
            )
            return done.returncode, done.text()

        # its CA among the system's roots (no --ca-file): trusted; absent from them: refused
        assert await probe(certs.ca) == (0, "livez: ok\n")
        code, said = await probe(certs.cert.parent / "no-such-bundle.pem")
        assert code == 1 and "certificate verify failed" in said, said
