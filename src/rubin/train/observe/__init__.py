"""What a run reports while it trains: step timing and metrics rows (``telemetry``), where the rows go
(``sinks``: JSONL, TensorBoard, MLflow), and the progress lines a person reads (``console``)."""
