"""The config-sync daemon: one change set at a time from the sources to a verified daemon (daemon.py),
written to the target and applied or rolled back (installing.py), and shown (reporting.py)."""
