"""Dissemination on top of the DHT's routing decisions: prefix-grouped application-layer
multicast and the LBDD bucket tree. Builds on ``dht`` only."""
