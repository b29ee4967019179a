"""Plans: what a candidate set would do, judged by the daemon's own pipeline without applying it
(offline, and the /v1/plan endpoint)."""
