"""config-sync for slurmdbd (config-sync --daemon slurmdbd): slurmdbd.conf checked by a throwaway
slurmdbd, applied by a reconfigure or a restart, rolled back when slurmdbd does not answer."""
