"""Rangecast's testing kit: property-based tests of the distributed 2d-tree, for the overlay
as shipped and for variants of it (docs/testing.md).

* ``rangecast.testkit.snapshot``: the tree as plain data (``TreeSnapshot``), from simulated
  peers (``snapshot_of``) or from a running swarm (``rangecast.testkit.live``);
* ``rangecast.testkit.invariants``: the invariant checkers, each violation a typed value
  (``Violation``) naming the peers and tree nodes involved;
* ``rangecast.testkit.simnet``: a simulated overlay (``SimOverlay``) with its oracle;
* ``rangecast.testkit.strategies``: hypothesis strategies for schemas, subscriptions, events
  and workloads;
* ``rangecast.testkit.machine``: a rule-based state machine (``OverlayMachine``) to subclass.

The last two need hypothesis (``pip install rangecast[testing]``); the others do not, and this
package imports none of them itself."""
