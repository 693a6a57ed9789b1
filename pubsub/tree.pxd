# Static types for Cython (pure-Python mode): pubsub/tree.py compiled with these declarations
# makes a hosted tree node and its leaf index extension types, read directly on every probing
# event. Interpreted, the .py ignores this file. docs/simulator.md, "Two speeds".

cimport cython

cdef class LeafIndex:
    cdef public object _entries, bytes
    cdef public dict _by_owner, bytes_of
    cdef public _Masks _masks
    @cython.locals(masks=_Masks)
    cpdef match(self, values, attr, cutoff, strict)

cdef class _Bounds:
    cdef public list bounds, fail

cdef class _Masks:
    cdef public list entries, xs, ys, ys_fail
    cdef public dict by_attr, has_attr
    cdef public object full, pieced, wide, wide_cutoff
    @cython.locals(lo_closed=_Bounds, lo_open=_Bounds, hi_closed=_Bounds, hi_open=_Bounds,
                   n=Py_ssize_t, has_attr=dict, entries=list)
    cpdef match(self, values, attr, cutoff, strict)

cdef class LeafTable:
    cdef public object max_depth
    cdef public dict rows
    cdef public set splits

cdef class TreeNode:
    cdef public object tid
    cdef public LeafIndex index
    cdef public LeafTable table
    cdef public dict seen
    @cython.locals(seen=dict)
    cpdef remember(self, eid, now, window)
