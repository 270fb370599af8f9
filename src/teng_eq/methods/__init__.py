"""Methods that solve a PDE with a network: TENG and the paper's baselines,
behind one interface (:class:`~teng_eq.methods.base.Method`). Each is named by a
``conf/method/*.yaml`` through its ``impl`` key and imported from there; this
package imports none of them."""
