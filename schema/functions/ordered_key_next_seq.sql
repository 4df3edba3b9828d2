-- ordered_key_next_seq returns a contiguous key's next seq: the lowest seq that has neither
-- finished nor been passed as a gap (null for a key in the default mode, or no key). Every seq
-- below it is finished, passed, archived, or a replayed job open again; an event below it
-- that is not stored is late. Completion does not write the key row (completers share its
-- lock), so the seqs that finished since next_seq was last written are read from the jobs:
-- the highest finished one, one probe of ordered_jobs_closed from its end. In a contiguous key
-- no job above the next seq has ever started, so that one is the last to have finished.
CREATE OR REPLACE FUNCTION ordered_key_next_seq(p_key text) RETURNS bigint
LANGUAGE sql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
    SELECT greatest(k.next_seq, k.archived_seq + 1,
                    (SELECT c.seq + 1 FROM ordered_jobs AS c
                     WHERE c.key = k.key AND c.status IN ('done', 'failed')
                     ORDER BY c.seq DESC LIMIT 1))
    FROM ordered_keys AS k
    WHERE k.key = p_key AND k.next_seq IS NOT NULL
$$;
COMMENT ON FUNCTION ordered_key_next_seq(text) IS
'Internal to ordered: the next seq of a contiguous key (null in the default mode). Called by the Go library and the CLI; not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
