"""A local fake Kubernetes API server for tests (see server.py)."""

from tests.fakekube.server import FakeKube, configuration, write_kubeconfig

__all__ = ["FakeKube", "configuration", "write_kubeconfig"]
