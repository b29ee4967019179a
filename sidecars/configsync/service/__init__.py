"""The config-sync daemon: one change set at a time from the sources to a verified daemon (daemon.py).
Its state is one object (state.py), owned by the daemon and handed to the installer (installing.py),
the reporter (reporting.py) and slurmctld's apply (ctld.py); another daemon's read, judge and apply
are a strategy (strategy.py) the daemon runs."""
