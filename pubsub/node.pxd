# Static types for Cython (pure-Python mode): pubsub/node.py compiled with these declarations
# makes the overlay an extension type that holds its parts (each one too) as C fields.
# docs/simulator.md, "Two speeds".

from rangecast.dht.core cimport Application
from rangecast.pubsub.host cimport TreeHost
from rangecast.pubsub.publisher cimport Publisher
from rangecast.pubsub.subscriber cimport Subscriber

cdef class PubSubNode(Application):
    cdef public object dht, schemas, capacity, rng, cfg, stats, _codec, _timers, _prober
    cdef public object _notifier, replication, expiry
    cdef public dict nodes, replicas, _parked
    cdef public list _events, _timer_heap
    cdef public tuple _parts
    cdef public Subscriber subscriber
    cdef public Publisher publisher
    cdef public TreeHost host
