"""What every role shares: settings from flags and environment, logging, the HTTP face, the daemon loop."""
