"""Whether a worker pod is Slinky's: owned by a slurm-operator NodeSet, whose controller picks pods
to remove by its own annotations and never reads Kubernetes' `controller.kubernetes.io/...` ones."""

from __future__ import annotations

from sidecars.kube import Pod

GROUP = "slinky.slurm.net"
KIND = "NodeSet"
# the operator drains a pod's Slurm node while this is "true", and undrains (its own reasons only) after
POD_CORDON = "nodeset.slinky.slurm.net/pod-cordon"


def nodeset_owned(pod: Pod) -> bool:
    """Its controller owner is a NodeSet of Slinky's API group (any version)."""
    return pod.owner_kind == KIND and pod.owner_api_version.partition("/")[0] == GROUP


def slinky_pod(pod: Pod, forced: bool | None) -> bool | None:
    """How this pod's scale-in rank is written: True as Slinky's annotations, False as Kubernetes'
    (ReplicaSet pods only: nothing else reads it), None not at all. `forced` is --slinky-mode
    (None: auto, decided per pod by its owner, so a fleet moving to Slinky is ranked both ways)."""
    if forced is True:
        return True
    if forced is None and nodeset_owned(pod):
        return True
    return False if pod.owner_kind == "ReplicaSet" else None
