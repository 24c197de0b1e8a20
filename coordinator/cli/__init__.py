"""The command-line programs of the coordinator: ``queue-coordinator`` (:mod:`.main`) and its
``tasks`` commands (:mod:`.tasks`), a REST client of the management API that never opens the
store. ``python -m coordinator.cli`` runs ``queue-coordinator``."""
