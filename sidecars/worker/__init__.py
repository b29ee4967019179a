"""The worker agent beside every slurmd: registration and healing, the drain hook's server, probes,
GPU job mapping. `service.Agent` is the daemon; the other modules each own one activity."""
