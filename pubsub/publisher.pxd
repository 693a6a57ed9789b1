# Static types for Cython (pure-Python mode), as pubsub/base.pxd: the publisher part an
# extension type on the shared state. docs/simulator.md, "Two speeds".

from rangecast.pubsub.base cimport NodeBase

cdef class Publisher(NodeBase):
    cdef public object _probe_out
