-- The outbox of Pulse messages (docs/events.md): written in the transaction of the change
-- that causes each, published in id order and deleted once the broker confirmed it. Written
-- only when publishing is on. cc is a JSON array of routing keys, body the message's JSON.
-- queue_event_outbox_lock has one row: the replica publishing holds it FOR UPDATE (the others
-- SKIP LOCKED and wait their turn), so one publisher at a time keeps the per-task order.
CREATE TABLE queue_event_outbox (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_key   TEXT NOT NULL,
    exchange    TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    cc          TEXT NOT NULL,
    body        TEXT NOT NULL
);
CREATE TABLE queue_event_outbox_lock (id INTEGER PRIMARY KEY CHECK (id = 1));
INSERT INTO queue_event_outbox_lock VALUES (1);
