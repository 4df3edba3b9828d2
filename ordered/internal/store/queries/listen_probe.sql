-- A worker's check that its LISTEN connection receives notifications: $1 is a payload only it
-- waits for.
SELECT pg_notify('ordered_jobs', $1);
