"""The Kubernetes models stand beside the client, as the Slurm ones do: a role may hold a Pod, a Node or
a Lease record, and catch the edge's errors, without loading kubernetes-asyncio (~35 MB a process)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.timeout(60)
def test_the_models_and_errors_load_without_the_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "from sidecars.kube import Deployment, KubeError, KubeNode, LeaseConflict, LeaseRecord, Pod\n"
        "from sidecars.kube import ReplicaSet, TokenReview\n"
        "import sidecars.kube.cache, sidecars.kube.nodename\n"
        "print('kubernetes_asyncio' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.timeout(60)
def test_the_client_is_still_what_loads_it() -> None:
    # the other half: the check above would pass on a broken import as well
    code = "import sys\nfrom sidecars.kube import KubeClient\nprint('kubernetes_asyncio' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True)
    assert out.stdout.strip() == "True", out.stderr
