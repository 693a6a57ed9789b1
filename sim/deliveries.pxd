# Static types for Cython (pure-Python mode): sim/deliveries.py compiled with these declarations
# makes the record and its collector extension types, whose per-delivery methods read their
# state directly. Interpreted, the .py ignores this file. docs/simulator.md, "Two speeds".

cimport cython

cdef class Deliveries:
    cdef public object block, stride, owner_node, owner_sid, keys, times
    cdef public dict sub_of, event_of, strays
    cdef public list expected
    @cython.locals(subs=dict)
    cpdef received(self, i, eid, sids, now)

cdef class Collector:
    cdef public object index_of_id, expect_installs, sim
    cdef public dict installed, stored
    cdef public Deliveries deliveries
