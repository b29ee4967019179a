"""config-sync: apply ConfigMap/Secret changes to slurmctld in place, validated first, verified after,
rolled back to the last known good set when Slurm refuses them."""
