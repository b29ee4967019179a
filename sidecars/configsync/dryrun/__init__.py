"""The dry run: a throwaway slurmctld of the live release started on the candidate set and a copy of
the live state, and what it says of the set and the jobs."""
