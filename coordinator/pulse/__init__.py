"""Pulse over AMQP, the transport the event publisher writes to: pika's asyncio connection with
its frames gathered into one write a loop turn (:mod:`~coordinator.pulse.gathered_writes`), a
batch's publisher confirms (:mod:`~coordinator.pulse.confirms`), and the publisher that holds
the connection and its confirm channel (:mod:`~coordinator.pulse.publisher`).

This layer knows the broker, not the outbox: which messages to publish, and what their
answers do to the outbox's rows, are the service's and the store's
(``coordinator/service/event_outbox.py``).
"""
