"""The command-line programs of the coordinator: ``queue-coordinator`` (:mod:`.main`), its
``tasks`` commands (:mod:`.tasks`) and its ``clients``/``roles`` commands (:mod:`.auth`), REST
clients of the coordinator's APIs that never open the store and share :mod:`.rest`.
``python -m coordinator.cli`` runs ``queue-coordinator``."""
