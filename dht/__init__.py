"""A Pastry-style prefix-routing DHT as a sans-IO state machine, and the wire codec every layer
uses. Knows nothing of publish/subscribe."""
