"""The soak test behind ``scripts/soak`` (issue 7).

A coordinator process, a persistent Azurite and K ``queue-worker`` processes run for a
bounded time while tasks are created; workers are SIGKILLed (and sometimes SIGTERMed) and
restarted at random, the coordinator is restarted twice and Azurite once gracefully and once
by SIGKILL (a crash that loses its last seconds of changes), and duplicate and garbage hints
are dropped into the queues. At the end the invariants are checked from three independent
sources: the store (task statuses), the workers' journals (what each handler
really ran, written by :mod:`soaklib.handler`) and the Azure queues themselves.

Modules: :mod:`soaklib.settings` (knobs and flags), :mod:`soaklib.handler` (the workers'
handler), :mod:`soaklib.journal` (its records), :mod:`soaklib.processes` (the worker
fleet), :mod:`soaklib.api` (createTask and status reads),
:mod:`soaklib.hints` (Azure inspection and noise), :mod:`soaklib.checks` (the invariants, pure),
:mod:`soaklib.soak` (the run), :mod:`soaklib.__main__` (flags, table, exit status). The
coordinator and Azurite processes come from :mod:`devharness`.

Everything talks to 127.0.0.1 only, and every loop stops by itself after its time bound.
"""
