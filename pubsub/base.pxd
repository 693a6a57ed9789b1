# Static types for Cython (pure-Python mode): pubsub/base.py compiled with these declarations
# makes the overlay's shared state an extension type, so that every part (each a subclass) reads
# it as C fields and calls the helpers as C functions. Interpreted, the .py ignores this file.
# docs/simulator.md, "Two speeds".

cdef class NodeBase:
    cdef public object dht, schemas, capacity, rng, cfg, stats, _codec, _timers, _expiring
    cdef public dict nodes, replicas, _parked, _spaces, _schemas_seen, _keys
    cdef public list _events

    cpdef _key(self, schema, tid)
    cpdef _route(self, schema, tid, msg, now)
    cpdef _send(self, peer, msg, now)
    cpdef _send_end(self, addr, msg)
    cpdef _cutoff(self, space)
    cpdef _space(self, schema, attr)
    cpdef _resolve(self, ref)
    cpdef _check_event(self, event)
