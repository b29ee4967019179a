"""config-sync beside HA controllers: which pod writes, the rollout of a set to every controller pod,
no controller in control, and a returning pod's gate."""
