# Static types for Cython (pure-Python mode), as pubsub/base.pxd: the tree-host part an
# extension type on the shared state, whose event path reads the hosted tree node
# (pubsub/tree.pxd) directly. docs/simulator.md, "Two speeds".

cimport cython

from rangecast.pubsub.base cimport NodeBase
from rangecast.pubsub.tree cimport TreeNode

cdef class TreeHost(NodeBase):
    cdef public object _ready_at, _forward_out, _probe_out, _notify, _on_delivery, _promote
    cdef public object _sync_replicas, _replicate_state, _replicate_op, _touch, _touch_node
    cdef public object _forget

    @cython.locals(node=TreeNode, by_owner=dict, targets=list)
    cpdef _on_probe_pub(self, msg, sender, now)
    cpdef _node_for(self, msg, space, tid, now)
