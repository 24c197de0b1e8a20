"""The store's contract by topic: each module is one abstract part, the calls its topic needs,
and :class:`coordinator.store.base.Store` is all of them."""
