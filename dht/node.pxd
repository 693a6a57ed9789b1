# Static types for Cython (pure-Python mode), as dht/core.pxd: PastryNode an extension type
# whose routing state (dht/routing.pxd) its hot path reads directly.

cimport cython

from rangecast.dht.core cimport DhtCore
from rangecast.dht.routing cimport LeafSet, Peer, RoutingTable

cdef class PastryNode(DhtCore):
    cdef public object _announced, _dead, _last_heard, _probing, _rounds
    cdef public LeafSet leaves
    cdef public RoutingTable table
    cdef public Py_ssize_t _bits, _b, _digits, _digit_mask

    @cython.locals(leaves=LeafSet, rows=list, entry=Peer, bits=Py_ssize_t, b=Py_ssize_t,
                   row=Py_ssize_t)
    cpdef _next_hop(self, key, exclude)
