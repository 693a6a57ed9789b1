/* Python's small-object arenas on transparent huge pages (see sim/hugepages.py).
 *
 * Why: at 10^5 simulated nodes the heap is several GB and every message touches a random node's
 * objects, so a large share of a run is TLB misses (a sampling profile of a 100,000-node run puts
 * 15 % of its samples on the line that merely calls the receiving core). With 2 MiB pages one TLB
 * entry covers 512 times as much heap.
 *
 * How: CPython's object allocator takes its arenas (1 MiB each) from a replaceable arena
 * allocator. This one reserves one large region of address space (MAP_NORESERVE: nothing is
 * committed until touched), marks it MADV_HUGEPAGE, and hands out arenas from it in address
 * order. Arenas the object allocator gives back are kept for reuse, not returned to the kernel
 * (returning 1 MiB would split a huge page). When the region is used up, or for a block that
 * was not allocated here, the previous allocator serves. Nothing about objects changes, only
 * where their arenas lie, so a run's results are the same bit for bit.
 *
 * The allocator is called with the GIL held and is never uninstalled (arenas from both must be
 * freed by the allocator that made them, which ha_free sorts out by address). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define SMALLEST_ARENA ((size_t)256 << 10) /* CPython's arena size before 3.10 */

static char *region, *bump, *region_end;
static void **spare;  /* arenas given back, reused last-in first-out */
static size_t spare_count, spare_cap, arena_size;
static PyObjectArenaAllocator previous;

static void *
ha_alloc(void *ctx, size_t size)
{
    (void)ctx;
    if (arena_size == 0) {
        arena_size = size;  /* CPython's arenas all have one size (1 MiB since 3.10) */
    }
    if (size == arena_size && spare_count > 0) {
        return spare[--spare_count];
    }
    if (size <= (size_t)(region_end - bump)) {
        void *p = bump;
        bump += size;
        return p;
    }
    return previous.alloc(previous.ctx, size);
}

static void
ha_free(void *ctx, void *p, size_t size)
{
    (void)ctx;
    if ((char *)p >= region && (char *)p < region_end) {
        /* spare_cap covers every arena the region holds, so this always has room. */
        if (size == arena_size && spare_count < spare_cap) {
            spare[spare_count++] = p;
        }
        return;
    }
    previous.free(previous.ctx, p, size);
}

static PyObject *
enable(PyObject *self, PyObject *args)
{
    unsigned long long reserve;
    (void)self;
    if (!PyArg_ParseTuple(args, "K", &reserve)) {
        return NULL;
    }
    if (region != NULL) {
        Py_RETURN_TRUE;
    }
    reserve -= reserve % HUGE_PAGE;
    if (reserve == 0) {
        PyErr_SetString(PyExc_ValueError, "reserve must be at least one huge page (2 MiB)");
        return NULL;
    }
    char *raw = mmap(NULL, reserve + HUGE_PAGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
        Py_RETURN_FALSE;
    }
    char *base = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (madvise(base, reserve, MADV_HUGEPAGE) != 0) {
        munmap(raw, reserve + HUGE_PAGE);
        Py_RETURN_FALSE;
    }
    spare_cap = reserve / SMALLEST_ARENA;
    spare = PyMem_RawMalloc(spare_cap * sizeof(void *));
    if (spare == NULL) {
        munmap(raw, reserve + HUGE_PAGE);
        Py_RETURN_FALSE;
    }
    region = bump = base;
    region_end = base + reserve;
    PyObject_GetArenaAllocator(&previous);
    PyObjectArenaAllocator mine = {NULL, ha_alloc, ha_free};
    PyObject_SetArenaAllocator(&mine);
    Py_RETURN_TRUE;
}

static PyObject *
used(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromSize_t(region == NULL ? 0 : (size_t)(bump - region));
}

static PyMethodDef methods[] = {
    {"enable", enable, METH_VARARGS,
     "enable(reserve) -> bool: serve object arenas from a huge-page region."},
    {"used", used, METH_NOARGS, "used() -> int: bytes of the region handed out so far."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hugepages", "Object arenas on transparent huge pages.", -1, methods,
};

PyMODINIT_FUNC
PyInit__hugepages(void)
{
    return PyModule_Create(&module);
}
