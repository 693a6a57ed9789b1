# Static types for Cython (pure-Python mode): sim/latency.py compiled with these declarations
# makes the engine's delay table an extension type that reads its arrays in C (the models
# themselves stay Python classes: they are abstract). docs/simulator.md, "Two speeds".

cimport cython
from cpython cimport array

cdef class Delays:
    cdef public array.array site, access
    cdef public list rows
    cdef public object model

    @cython.locals(row=array.array, n=Py_ssize_t, d=double)
    cpdef double one_way_ms(self, Py_ssize_t a, Py_ssize_t b) except? -1.0
