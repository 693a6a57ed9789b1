"""The deterministic discrete-event simulator that drives the sans-IO cores, its latency models,
scenarios, experiments and the ``rangecast`` command line."""
