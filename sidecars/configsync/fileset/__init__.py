"""A change set's files: read from the volumes and hashed, parsed (slurm.conf, slurmdbd.conf), staged
into the target by one rename, and the watcher and debouncer that wake the loop."""
