"""Where a whole-cluster upgrade's daemons run: the seam (roles.py) and its Kubernetes side, the
workloads changed (kube.py), the workers' budgeted roll (kube_roll.py) and the Jobs it runs
(kube_jobs.py). The dev cluster's side is devcluster/swap_roles.py."""
