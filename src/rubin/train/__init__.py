"""The production training loop: config, strategies, precision, data, checkpoints, telemetry, faults."""
