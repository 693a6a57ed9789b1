"""The broker-overlay systems of the reference papers, as sans-IO cores: the substrate
(``filters``, ``graphs``, ``tables``, ``messages``, ``broker``: SIENA-style filter trees, PADRES
advertisements and tree-ID routing) and the systems built on it (``kyra``, ``octopia``, ``pop``,
``grape``). Builds on ``dht`` (the wire codec and errors) and ``pubsub`` (schemas and
subscriptions). docs/brokers.md is the substrate's design note, docs/baselines.md the systems'."""
