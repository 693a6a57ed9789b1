# Static types for Cython (pure-Python mode): sim/engine.py compiled with these declarations
# keeps its event heap in C structs; interpreted, the .py ignores this file and uses heapq.
# docs/simulator.md, "Two speeds".

cimport cython

from rangecast.sim.latency cimport Delays

cdef struct Entry:
    # Ordered by (t, seq): the sequence number breaks ties in insertion order.
    double t
    long long seq
    int kind
    Py_ssize_t node
    # _MSG: the sender's index; otherwise unused.
    Py_ssize_t src
    # Index of the event's object in Simulator._objs (the message, or a call's (fn, args));
    # -1: none (a timer).
    Py_ssize_t slot

cdef class TypeCount:
    cdef public str name
    cdef public long long messages, bytes
    cdef public object per_node

cdef class NetStats:
    cdef public object sent_messages, sent_bytes, received_messages
    cdef public dict by_type
    cdef public double delay_ms
    cdef public long long lost, to_dead, unknown_addr, events

ctypedef Entry* EntryPtr
ctypedef void* VoidPtr

cdef class Simulator:
    cdef public object latency, loss, now, cores, addrs, alive, index_of, uplink_bps
    cdef public NetStats stats
    cdef public object _uplink_free, flow_bps, _flow_free, _q, _counter, _armed, _rng, _stop
    cdef public object _progress, _progress_every, _type_counts, codec, _encode, _flush_fn
    cdef public object _on_events, _take_events, _message_log, _drop
    cdef Entry* _heap
    cdef Py_ssize_t* _free
    cdef list _objs
    cdef Py_ssize_t _n, _cap, _nfree
    cdef long long _seq

    cdef int _push(self, double t, int kind, Py_ssize_t node, object a, object b) except -1
    @cython.locals(h=EntryPtr, pos=Py_ssize_t, parent=Py_ssize_t, slot=Py_ssize_t)
    cdef int _push_c(self, double t, int kind, Py_ssize_t node, Py_ssize_t src, object obj) except -1
    @cython.locals(h=EntryPtr, last=Entry, c=Entry, r=Entry, pos=Py_ssize_t, child=Py_ssize_t,
                   n=Py_ssize_t)
    cdef Entry _pop_c(self)
    @cython.locals(cap=Py_ssize_t, slot=Py_ssize_t, heap=VoidPtr, free=VoidPtr)
    cdef int _grow(self) except -1
    @cython.locals(top=Entry, t=double, limit=double, kind=int, i=Py_ssize_t,
                   countdown=long, check_every=long, obj=object, now=object,
                   stats=NetStats)
    cpdef run(self, until=*)
