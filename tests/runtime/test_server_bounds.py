"""Every server is bounded: a slow client (headers a byte at a time, a body that never ends, more
connections than the cap) is cut off within the bound while everyone else is served; and the
control plane and config-sync serve TLS from a Secret's files, which the agent and `status` trust
through a CA file."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from sidecars import probe
from sidecars.devcluster import DevCluster
from sidecars.operator.client import ControlPlaneClient as ApiClient
from sidecars.runtime import http
from sidecars.runtime.settings import ConfigError
from sidecars.worker.cp_client import AgentClient, ControlPlaneUnavailable
from tests.configsync.harness import config_sync
from tests.controlplane.conftest import offline
from tests.runtime.slowclient import CAP, SMALL, body_never_ends, header_trickle, over_the_cap, tcp, unix
from tests.settings import TOKEN, VIEWER
from tests.worker.agents import running_agent, settings_for


@contextlib.asynccontextmanager
async def control_plane_app(
    tls: ssl.SSLContext | None = None, limits: http.ServerLimits = SMALL
) -> AsyncIterator[int]:
    """The control plane's HTTP face as `running()` serves it (no Slurm behind: its page still serves)."""
    plane = offline(http_limits=limits, tls=tls)
    s = plane.settings
    async with http.serve(plane.http_app(), "127.0.0.1", 0, s.http_limits, s.tls) as port:
        yield port


async def test_the_control_plane_cuts_slow_clients_off() -> None:
    async with control_plane_app() as port:
        await header_trickle(tcp(port), SMALL, ok_path="/ui/")
        await body_never_ends(tcp(port), SMALL, "/v1/nodes/n1/drain", ok_path="/ui/", token=TOKEN)
    async with control_plane_app(limits=CAP) as port:
        await over_the_cap(tcp(port), CAP, ok_path="/ui/")


@pytest.mark.releases("slurm22")  # the server is ours, not Slurm's
async def test_config_sync_cuts_slow_clients_off(cluster: DevCluster) -> None:
    async with config_sync(cluster, http_limits=SMALL, operator_token=TOKEN) as sync:
        port = sync.running.port
        await header_trickle(tcp(port), SMALL)
        await body_never_ends(tcp(port), SMALL, "/v1/plan", token=TOKEN)  # its one route with a body
    async with config_sync(cluster, http_limits=CAP, operator_token=TOKEN) as sync:
        await over_the_cap(tcp(sync.running.port), CAP)


@pytest.mark.releases("slurm22")
@pytest.mark.cluster(nodes=1)
async def test_the_worker_agent_cuts_slow_clients_off(cluster: DevCluster, sockdir: Path) -> None:
    s = settings_for(cluster, sockdir, http_limits=SMALL)
    async with running_agent(cluster, s) as agent:
        assert agent.http_port is not None
        # its probes and metrics over TCP, and the drain hook's socket (GET /v1/drain: the state)
        for opener, ok_path in ((tcp(agent.http_port), "/livez"), (unix(str(s.socket_path)), "/v1/drain")):
            await header_trickle(opener, SMALL, ok_path=ok_path)
        # the drain is served on the socket only (TCP has no route with a body)
        await body_never_ends(unix(str(s.socket_path)), SMALL, "/v1/drain", ok_path="/v1/drain")
        assert not agent.drainer.active  # nothing the slow clients sent was acted on
    async with running_agent(cluster, dataclasses.replace(s, http_limits=CAP)) as agent:
        assert agent.http_port is not None
        await over_the_cap(tcp(agent.http_port), CAP)


# ---------------------------------------------------------------------------------------- TLS
@dataclasses.dataclass
class Certs:
    ca: Path
    cert: Path
    key: Path

    def server(self) -> ssl.SSLContext:
        ns = argparse.Namespace(tls_cert_file=str(self.cert), tls_key_file=str(self.key))
        context = http.tls_from(ns)
        assert context is not None
        return context

    def client(self) -> ssl.SSLContext:
        context = http.client_tls(str(self.ca))
        assert context is not None
        return context


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it (openssl, EC keys)."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30, cwd=tmp_path)

    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=test-ca", "-days", "1")
    run("req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=127.0.0.1")
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run(
        "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "tls.crt", "-days", "1", "-extfile", "san.ext",
    )  # fmt: skip
    return Certs(tmp_path / "ca.crt", tmp_path / "tls.crt", tmp_path / "tls.key")


async def test_the_control_plane_serves_tls_that_status_and_the_agent_trust(certs: Certs) -> None:
    async with control_plane_app(tls=certs.server()) as port:
        url = f"https://127.0.0.1:{port}"
        # `status` and the operator's commands: the CA from --ca-file
        api = ApiClient(url=url, token=VIEWER, timeout_seconds=10, tls=certs.client())
        async with api.session() as s, s.get(url + "/v1/openapi.json") as r:
            assert r.status == 200 and "securitySchemes" in (await r.json())["components"]
        # the agent: its client over the same CA; the answer (no fleet read yet) came through TLS
        connector = aiohttp.TCPConnector(ssl=certs.client())
        async with aiohttp.ClientSession(connector=connector) as session:
            agent = AgentClient(session, url, lambda: TOKEN, "n1")
            with pytest.raises(ControlPlaneUnavailable, match="HTTP 503"):
                await agent.node(None, 0)
        # a client that does not trust the CA gets nowhere; plain HTTP gets no answer either
        async with aiohttp.ClientSession() as s:
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await s.get(url + "/livez")
            with pytest.raises(aiohttp.ClientError):
                await s.get(f"http://127.0.0.1:{port}/livez")
        await header_trickle(tcp(port, certs.client()), SMALL, ok_path="/ui/")


@pytest.mark.releases("slurm22")
async def test_config_sync_serves_tls(cluster: DevCluster, certs: Certs) -> None:
    async with config_sync(cluster, tls=certs.server(), viewer_token=VIEWER) as sync:
        url = f"https://127.0.0.1:{sync.running.port}"
        connector = aiohttp.TCPConnector(ssl=certs.client())
        headers = {"Authorization": f"Bearer {VIEWER}"}
        async with (
            aiohttp.ClientSession(connector=connector, headers=headers) as s,
            s.get(url + "/status") as r,
        ):
            assert r.status == 200 and "applied" in await r.json()
        # the exec probes, pointed at the https daemon with the CA
        assert await probe.check(url, "readyz", 10.0, certs.client()) == (True, "readyz: ok")
        assert not (await probe.check(url, "readyz", 10.0))[0]  # without it: not trusted


def test_tls_flags_are_checked_at_start(certs: Certs, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="go together"):
        http.tls_from(argparse.Namespace(tls_cert_file=str(certs.cert), tls_key_file=None))
    with pytest.raises(ConfigError, match="cannot load"):
        http.tls_from(argparse.Namespace(tls_cert_file=str(certs.cert), tls_key_file=str(certs.ca)))
    with pytest.raises(ConfigError, match="cannot load"):
        http.client_tls(str(tmp_path / "missing.crt"))
    assert http.tls_from(argparse.Namespace(tls_cert_file=None, tls_key_file=None)) is None
