"""The benchmark harness behind ``scripts/bench`` (issue 7).

Each row of the table is one module: :mod:`benchlib.raw` (put -> get -> delete straight against
Azurite), :mod:`benchlib.e2e` (createTask -> worker SDK -> reportCompleted through a
``queue-coordinator serve`` process), :mod:`benchlib.coordinator_only` (claimTask +
reportCompleted without Azure), :mod:`benchlib.peers` (Celery, Dramatiq, RQ and
procrastinate; :mod:`benchlib.peer_apps` is their side of the job), :mod:`benchlib.idle`
(idle workers' Azure requests and pickup time), :mod:`benchlib.create` (createTask against
createTasks, hints into Azurite), :mod:`benchlib.isolation` (the end-to-end row with and
without ``queue-worker --isolation process``), :mod:`benchlib.artifacts` (artifact bytes
through the coordinator against straight to its backend, and a 1 GiB upload's memory and
createTask latency), :mod:`benchlib.events` (Pulse publishing off against on, and the
outbox's drain after a broker outage). :mod:`benchlib.common` holds what they share (CPU
accounting, percentiles, depth pacing, the metered window, the row type),
:mod:`benchlib.latency` pending time under load, :mod:`benchlib.noop` the no-op handler and
job that note their starts, :mod:`benchlib.coordproc` the coordinator of a row and its task
client;
:mod:`benchlib.__main__` parses the flags and prints the table.
Processes, Azurite, databases and API calls come from :mod:`devharness`.

Everything talks to 127.0.0.1 only, and every loop stops by itself after its time bound.
"""
