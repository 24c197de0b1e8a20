"""Task storage: the :class:`~coordinator.store.base.Store` interface and its drivers."""
