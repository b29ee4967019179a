"""The names the sidecars put on the wire, each stated once: Kubernetes Event reasons, labels,
annotations and pod conditions, the drain reasons we write in Slurm, and the drain API's results
and limits. Everything else imports them from here; a test fails on a literal of one elsewhere.

The lowest layer: it imports nothing of the package and runs nothing at import time."""
