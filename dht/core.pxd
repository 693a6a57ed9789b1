# Static types for Cython (pure-Python mode): dht/core.py compiled with these declarations makes
# DhtCore an extension type, so that its methods read and write their node's state directly
# rather than through attribute lookups. Interpreted, the .py ignores this file.
# docs/simulator.md, "Two speeds".

from rangecast.dht.routing cimport Peer

cdef class DhtCore:
    cdef public object _avoiding, _e2e, _graveyard, _join_attempts, _join_contact
    cdef public object _suspects, _timers, app, by_join, cfg, codec, locality
    cdef public Peer me
    cdef public object notary, proximity, rng, space, state, stats
    cdef public list _out
    cdef public dict _pending
    cdef public Py_ssize_t _nbytes
    cdef public bint _hop_acks

# The KBR upcalls' base: an extension type so that an application compiled on top of it (the
# overlay's PubSubNode) can be one too. Applications written in Python subclass it as ever.
cdef class Application:
    pass
