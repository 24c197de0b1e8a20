-- The outbox of Pulse messages (docs/events.md): written in the transaction of the change
-- that causes each, published in id order and deleted once the broker confirmed it. Written
-- only when publishing is on. cc is a JSON array of routing keys, body the message's JSON.
CREATE TABLE queue_event_outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_key   TEXT NOT NULL,
    exchange    TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    cc          TEXT NOT NULL,
    body        TEXT NOT NULL
);
