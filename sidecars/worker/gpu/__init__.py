"""The agent's GPUs: their check (check.py) and what a fault does (drain.py), and the GPU -> job
map for dcgm-exporter (map_step.py) with its bounded metric (attribution.py)."""
