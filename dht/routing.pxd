# Static types for Cython (pure-Python mode): dht/routing.py compiled with these declarations
# makes the routing state extension types, read directly by the hot path (dht/node.pxd).
# Interpreted, the .py ignores this file. docs/simulator.md, "Two speeds".

cdef class Peer:
    cdef public object id
    cdef public object addr
    cdef public object handle

cdef class LeafSet:
    cdef public dict _ids
    cdef public list _ring, _ring_peers, left, right
    cdef public object _left_span, _right_span, _size, half, own, space
    cdef public bint wraps
    cpdef in_range(self, key)
    cpdef closest(self, key, exclude=*)

cdef class RoutingTable:
    cdef public object own, space
    cdef public list rows
