-- Messages the broker refuses (docs/events.md): attempts counts the refusals, retry_at is
-- when the message may go out again (0: now); the later messages of its task wait with it.
-- After REFUSALS_BEFORE_PARKING refusals a message moves to queue_event_outbox_parked.
ALTER TABLE queue_event_outbox ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE queue_event_outbox ADD COLUMN retry_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX queue_event_outbox_retrying ON queue_event_outbox (retry_at, event_key)
    WHERE retry_at > 0;
CREATE TABLE queue_event_outbox_parked (
    id          BIGINT PRIMARY KEY,
    event_key   TEXT NOT NULL,
    exchange    TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    cc          TEXT NOT NULL,
    body        TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    reason      TEXT NOT NULL,
    parked      BIGINT NOT NULL
);
