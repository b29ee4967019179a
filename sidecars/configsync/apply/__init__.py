"""config-sync on the live slurmctld: reconfigure or restart it, verify what it and its workers report,
judge the harm a change did, and keep the run-time node state a reconfigure would lose."""
