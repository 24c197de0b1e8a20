"""Background actors, one module each (as in the Taskcluster queue service).

Every actor is a ``run_once(service, ...) -> int`` pass that acts on what one store scan
returns and reports how many tasks it changed; :mod:`coordinator.resolvers.runner` repeats the
passes on an interval. Which actors a process runs, on what interval, and which only with
Azure queues is one table, :data:`coordinator.app.ACTORS`. Any number of copies may run at
once, in one process or many: every change goes through compare-and-set, and each transition
re-checks the state it acts on.
"""
