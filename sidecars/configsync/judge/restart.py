"""Which changes Slurm cannot take by `scontrol reconfigure`: they need slurmctld restarted.

Sources: slurm.conf(5) of Slurm 22.05 ("A restart of slurmctld is required for changes to this
parameter to take effect", printed under each parameter below), scontrol(1) 22.05 `reconfigure`
("The slurmctld daemon and all slurmd daemons must also be restarted if nodes are added to or
removed from the cluster"), and what was measured here: on 22.05 a reconfigure that adds a node
ends in `fatal: MaxNodeCount has changed`, while 24.11's reconfigure re-executes slurmctld and takes
added and removed nodes. Key material (munge/slurm/jwt keys) is read once at daemon start.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.configsync.fileset.sources import FileSet
from sidecars.slurm import hostlist
from sidecars.slurm.models import Version

SLURM_CONF_5 = "slurm.conf(5), Slurm 22.05"

# lower-case key -> where the restart requirement is documented
RESTART_KEYS: dict[str, str] = {
    "accountingstorageenforce": SLURM_CONF_5,
    "authalttypes": "slurm.conf(5): authentication plugins are loaded at daemon start",
    "authaltparameters": "slurm.conf(5): authentication plugins are loaded at daemon start",
    "authinfo": "slurm.conf(5): authentication plugins are loaded at daemon start",
    "authtype": "slurm.conf(5): authentication plugins are loaded at daemon start",
    "corespecplugin": SLURM_CONF_5 + " (slurmd)",
    "credtype": SLURM_CONF_5,
    "grestypes": SLURM_CONF_5 + " (slurmctld and slurmd)",
    "jobcontainertype": SLURM_CONF_5,
    "maxjobcount": SLURM_CONF_5,
    "maxnodecount": "measured on 22.05: `fatal: MaxNodeCount has changed ... during reconfig`",
    "plugindir": SLURM_CONF_5 + " (slurmctld and slurmd)",
    "powerplugin": SLURM_CONF_5,
    "proctracktype": SLURM_CONF_5,
    "schedulertype": SLURM_CONF_5,
    "selecttype": SLURM_CONF_5 + " (22.05 refuses it: `SelectType change requires restart`)",
    "selecttypeparameters": SLURM_CONF_5,
    "slurmctldhost": SLURM_CONF_5,
    "controlmachine": SLURM_CONF_5,
    "slurmctldparameters": SLURM_CONF_5,
    "slurmctldport": SLURM_CONF_5,
    "slurmdport": SLURM_CONF_5,
    "statesavelocation": SLURM_CONF_5,
    "switchtype": SLURM_CONF_5 + " (all daemons and running jobs)",
    "slurmuser": "slurmctld drops privileges to SlurmUser once, at start",
    "tasktype": SLURM_CONF_5,
    "taskplugin": "slurmd loads its task plugin at start",
    "topologyplugin": "slurm.conf(5): plugin loaded at start",
}

NODES_RECONFIGURABLE_SINCE = (23, 11)  # reconfigure re-executes slurmctld from 23.11 on


@dataclass(frozen=True, slots=True)
class RestartReason:
    what: str
    source: str

    def __str__(self) -> str:
        return f"{self.what} [{self.source}]"


def _norm(value: str | None) -> str | None:
    return None if value is None else value.strip().lower()


def classify(
    old: SlurmConf, new: SlurmConf, old_files: FileSet, new_files: FileSet, version: Version
) -> list[RestartReason]:
    """Every reason the change from `old` to `new` needs slurmctld restarted (empty: reconfigure will do)."""
    reasons: list[RestartReason] = []
    for key, source in RESTART_KEYS.items():
        a, b = _norm(old.options.get(key)), _norm(new.options.get(key))
        if a != b:
            reasons.append(RestartReason(f"{key} changed", source))
    old_nodes, new_nodes = set(old.node_names()), set(new.node_names())
    if old_nodes != new_nodes and not version.at_least(*NODES_RECONFIGURABLE_SINCE):
        added, removed = sorted(new_nodes - old_nodes), sorted(old_nodes - new_nodes)
        what = "; ".join(
            p
            for p in (
                f"nodes added: {hostlist.compress(added)}" if added else "",
                f"nodes removed: {hostlist.compress(removed)}" if removed else "",
            )
            if p
        )
        source = f"scontrol(1) reconfigure, Slurm {version.major}.{version.minor:02d}"
        reasons.append(RestartReason(what, source))
    for name in sorted(set(old_files.files) | set(new_files.files)):
        a_entry, b_entry = old_files.files.get(name), new_files.files.get(name)
        secret = (a_entry and a_entry.secret) or (b_entry and b_entry.secret)
        if secret and a_entry and b_entry and a_entry.data != b_entry.data:
            reasons.append(RestartReason(f"key file {name} changed", "keys are read once at daemon start"))
        elif secret and b_entry and not a_entry:
            reasons.append(RestartReason(f"key file {name} added", "keys are read once at daemon start"))
    return reasons
