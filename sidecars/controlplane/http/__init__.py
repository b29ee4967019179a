"""What the control plane serves: the /v1/ API (fleet, maintenance, upgrade) with its OpenAPI
document and access rules, and the operator's page at /ui/; `Face` builds and installs them."""

from sidecars.controlplane.http.face import Face

__all__ = ["Face"]
