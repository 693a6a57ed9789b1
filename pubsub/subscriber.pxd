# Static types for Cython (pure-Python mode), as pubsub/base.pxd: the subscriber part an
# extension type on the shared state. docs/simulator.md, "Two speeds".

from rangecast.pubsub.base cimport NodeBase

cdef class Subscriber(NodeBase):
    cdef public dict _subs, _got
    cdef public object _next_sid
    cdef public double _got_prune_at
