-- ordered_key_next_seq returns a contiguous key's next seq: the lowest seq that has neither
-- finished nor been passed as a gap (null for a key in the default mode, or no key). Every seq
-- below it is finished, passed, archived, or a replayed job open again; an event below it
-- that is not stored is late. Whatever finishes a job of a contiguous key (a completion, a
-- failure that passes it, a skip) moves next_seq past it, with the key row held.
CREATE OR REPLACE FUNCTION ordered_key_next_seq(p_key text) RETURNS bigint
LANGUAGE sql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
    SELECT greatest(k.next_seq, k.archived_seq + 1)
    FROM ordered_keys AS k
    WHERE k.key = p_key AND k.next_seq IS NOT NULL
$$;
COMMENT ON FUNCTION ordered_key_next_seq(text) IS
'Internal to ordered: the next seq of a contiguous key (null in the default mode). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
