-- A producer in psql: business rows and their events in one transaction (docs/sql.md).
-- Run as: psql -X -v ON_ERROR_STOP=1 -f producer.sql URL, with the queue's schema first on the
-- search_path. Each invoice is a business row; its event is (customer, seq), and the worker of
-- the test writes what it runs to processed.
CREATE TABLE invoices (id text PRIMARY KEY, customer text NOT NULL, seq bigint NOT NULL);
CREATE TABLE refused_events (key text, seq bigint, sqlstate text);
CREATE TABLE processed (n bigint GENERATED ALWAYS AS IDENTITY, key text, seq bigint);

-- Committed: the invoices and their events, through both functions.
BEGIN;
INSERT INTO invoices VALUES ('in_1', 'cust-1', 1), ('in_2', 'cust-1', 2), ('in_3', 'cust-2', 1);
SELECT * FROM ordered_enqueue('[
    {"key": "cust-1", "seq": 1, "kind": "invoice.paid", "payload": {"invoice": "in_1"}},
    {"key": "cust-1", "seq": 2, "kind": "invoice.paid", "payload": {"invoice": "in_2"}},
    {"key": "cust-2", "seq": 1, "kind": "invoice.paid", "payload": {"invoice": "in_3"}}
]');
INSERT INTO invoices VALUES ('in_4', 'cust-1', 3), ('in_5', 'cust-2', 2);
SELECT * FROM ordered_enqueue_events(ARRAY[
    ROW('cust-1', 3, 'invoice.paid', '{"invoice": "in_4"}', NULL, NULL)::ordered_event,
    ROW('cust-2', 2, 'invoice.paid', '{"invoice": "in_5"}', NULL, 5)::ordered_event
]);
COMMIT;

-- Rolled back: neither the invoice nor its event.
BEGIN;
INSERT INTO invoices VALUES ('in_6', 'cust-3', 1);
SELECT * FROM ordered_enqueue('[{"key": "cust-3", "seq": 1, "kind": "invoice.paid", "payload": {"invoice": "in_6"}}]');
ROLLBACK;
