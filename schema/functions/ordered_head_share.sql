-- ordered_head_share locks the head row of p_key that the caller's snapshot sees FOR SHARE and
-- returns true. A single enqueue from REPEATABLE READ or SERIALIZABLE calls it with the key
-- row held: a head claimed, moved or gone since the snapshot raises a serialization error.
CREATE OR REPLACE FUNCTION ordered_head_share(p_key text) RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM FROM ordered_heads WHERE key = p_key FOR SHARE;
    RETURN true;
END
$$;
COMMENT ON FUNCTION ordered_head_share(text) IS
'Internal to ordered: the head lock of a single enqueue from REPEATABLE READ or SERIALIZABLE. Called by the Go library; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
