"""The development harness that the tests, ``scripts/bench``, ``scripts/soak``,
``scripts/measure_listing_rss.py`` and ``scripts/bench_management.py`` share; it is not part
of the wheel.

Modules, each owning one concern: :mod:`devharness.ports` (a free TCP port),
:mod:`devharness.waiting` (polling with a deadline), :mod:`devharness.processes` (child
processes, ``queue-coordinator serve`` among them), :mod:`devharness.postgres` (throwaway
databases), :mod:`devharness.api` (signed calls to the REST API),
:mod:`devharness.azurite` (the Azurite emulator, also ``python -m devharness.azurite`` for
``./scripts/dev``), :mod:`devharness.tasks` (the one createTask body factory),
:mod:`devharness.bulk_tasks` (a store filled with many tasks, as the
coordinator would have stored them) and :mod:`devharness.query_plans` (the plans of the
management API's statements).
"""
