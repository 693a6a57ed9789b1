"""The modules Cython compiles from their own ``.py`` source (pure-Python mode: the same files
run interpreted). Read by ``setup.py`` (which cannot import the package while building it: this
file imports nothing) and by ``rangecast._speed`` (which loads them, or their source).

Order is the profile's: the engine, then the DHT's routing state and message path, then the
overlay's event path, then the experiment's collector (docs/simulator.md, "Two speeds")."""

#: Each is built from ``<name with dots as slashes>.py`` under the repository root, through the
#: package's links (``rangecast/sim`` -> ``sim``), so that Cython names it as Python does.
MODULES: tuple[str, ...] = (
    "rangecast.sim.engine",
    "rangecast.dht.routing",
    "rangecast.dht.ids",
    "rangecast.dht.timers",
    "rangecast.dht.core",
    "rangecast.dht.node",
    "rangecast.dht.kademlia",
    "rangecast.dht.wire",
    "rangecast.pubsub.dissemination",
    "rangecast.pubsub.host",
    "rangecast.pubsub.tree",
    "rangecast.pubsub.space",
    "rangecast.pubsub.subscription",
    "rangecast.pubsub.base",
    "rangecast.pubsub.node",
    "rangecast.pubsub.peer",
    "rangecast.pubsub.subscriber",
    "rangecast.pubsub.publisher",
    "rangecast.sim.latency",
    "rangecast.sim.deliveries",
)
