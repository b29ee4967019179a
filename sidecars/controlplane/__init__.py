"""The control plane: one per cluster. Reads the fleet from Slurm once per interval, serves it to the
worker agents, batches their drains, ranks workers for scale-in, recycles unregistered pods (capped)
and exports autoscaling metrics. Only the Lease holder writes to Slurm and Kubernetes."""
