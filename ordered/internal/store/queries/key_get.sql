-- A key's row: its highest enqueued seq, its highest archived seq and when it was first seen.
-- $1 key  text  the key
SELECT key, seq_max, archived_seq, created_at
FROM ordered_keys
WHERE key = $1;
