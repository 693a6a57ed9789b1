# Static types for Cython (pure-Python mode), as dht/node.pxd: KademliaNode an extension type on
# the compiled DhtCore (a Python subclass would reach the core's attributes through descriptor
# calls, slower than the interpreter's own slots).

from rangecast.dht.core cimport DhtCore

cdef class KademliaNode(DhtCore):
    cdef public object _dead, _early, _last_heard, _lookups, _repair_again, _roots, _siblings
    cdef public object table
