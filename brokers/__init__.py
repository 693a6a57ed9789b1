"""The broker-overlay substrate: sans-IO content-based brokers (SIENA-style filter trees, PADRES
advertisements and tree-ID routing) that the broker baselines (OctopiA, Kyra, POP/GRAPE) build on.
Builds on ``dht`` (the wire codec and errors) and ``pubsub`` (schemas and subscriptions).
docs/brokers.md is the design note."""
