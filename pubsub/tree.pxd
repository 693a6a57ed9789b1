# Static types for Cython (pure-Python mode): pubsub/tree.py compiled with these declarations
# makes a hosted tree node and its leaf index extension types, read directly on every probing
# event. Interpreted, the .py ignores this file. docs/simulator.md, "Two speeds".

cimport cython

cdef class LeafIndex:
    cdef public object _entries, bytes
    cdef public dict _by_owner, bytes_of
    cdef public _Masks _masks
    cdef public _Flat _flat
    @cython.locals(masks=_Masks, flat=_Flat)
    cpdef match(self, values, attr, cutoff, strict)

cdef class _Flat:
    cdef public list entries
    cdef double[:] xs, ys, los, his
    cdef long[:] first, attrs, flags
    cdef signed char[:] pieced
    @cython.locals(vals=list, n=Py_ssize_t, k=Py_ssize_t, j=Py_ssize_t, a=Py_ssize_t,
                   f=long, has_v=bint, has_cut=bint, v=double, cut=double, x=double, y=double,
                   w=double, lo=double, hi=double, ok=bint, out=list, entries=list,
                   xs=double[:], ys=double[:], los=double[:], his=double[:],
                   first=long[:], attrs=long[:], flags=long[:], pieced="signed char[:]")
    cpdef list match(self, values, attr, cutoff, strict)

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
