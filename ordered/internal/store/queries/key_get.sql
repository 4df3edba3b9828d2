-- A key's row: its highest enqueued seq, its highest archived seq, when it was first seen, and,
-- for a contiguous key, its next seq (null in the default mode).
-- $1 key  text  the key
SELECT key, seq_max, archived_seq, created_at, ordered_key_next_seq(key)
FROM ordered_keys
WHERE key = $1;
