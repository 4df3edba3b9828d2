-- A producer in psql that keeps its transaction when an event is refused (docs/sql.md): a
-- savepoint around the enqueue, and the refusal recorded beside the business row. Run after
-- producer.sql, once the worker has run cust-1's events, so that cust-1 seq 0 is late.
BEGIN;
INSERT INTO invoices VALUES ('in_7', 'cust-1', 4);
SAVEPOINT enqueue;
\set ON_ERROR_STOP off
SELECT * FROM ordered_enqueue('[{"key": "cust-1", "seq": 0, "kind": "invoice.paid", "payload": {"invoice": "in_0"}}]');
\set ON_ERROR_STOP on
ROLLBACK TO SAVEPOINT enqueue;
INSERT INTO refused_events VALUES ('cust-1', 0, :'LAST_ERROR_SQLSTATE');
SELECT * FROM ordered_enqueue('[{"key": "cust-1", "seq": 4, "kind": "invoice.paid", "payload": {"invoice": "in_7"}}]');
COMMIT;
