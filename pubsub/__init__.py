"""The content-based overlay: schemas, subscriptions, the logic-space mapping and the distributed
2d-tree on the DHT (random-probe installation and publication). Builds on ``dht`` and
``multicast``."""
