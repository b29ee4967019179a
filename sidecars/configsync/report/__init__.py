"""What config-sync says of each outcome, the same way everywhere: the history, the metrics, the
Kubernetes Event and the log line."""
