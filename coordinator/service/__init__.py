"""The service layer: task operations over the store, hint publishing, dependencies, claimWork
and the clock. Handlers and resolvers call it; it is the only layer that writes the store."""
