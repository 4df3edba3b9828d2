-- One plain one-row INSERT of an event: the yardstick of a single-event enqueue.
INSERT INTO plain_ev (key, seq, payload) VALUES ($1, $2, $3)
