"""Real peers: the trio driver of the protocol cores, signed identities, the client API and the
command line for a local swarm."""
