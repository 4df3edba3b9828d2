-- Replay and skip write their key's row, not only lock it. They move the key's head, and a
-- REPEATABLE READ or SERIALIZABLE caller must not compute heads from a snapshot taken before
-- such a move: PostgreSQL raises a serialization error for a row written after the snapshot,
-- which the completion's key lock (FOR SHARE) and the enqueue's key upsert then meet, but not
-- for a row that was only locked. Found by review: a CompleteTx in such a transaction, with a
-- replay of the key's failed job committed after its snapshot, chose the next head from the
-- snapshot (where the replayed job was still failed), and the key's lowest open job was left
-- without the head: nothing of the key could be claimed. An enqueue behind the head used to
-- repair it by chance; since 010 it leaves heads alone.
-- Enqueue and archival already write the key row; completion and failure change only the
-- head job's row, which a stale enqueuer locks (FOR SHARE) and so meets.
CREATE OR REPLACE FUNCTION ordered_job_lock_key(p_id bigint, p_exclusive boolean,
                                                OUT o_key text, OUT o_seq bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT j.key, j.seq INTO o_key, o_seq FROM ordered_jobs AS j WHERE j.id = p_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_exclusive THEN
        -- The same lock as FOR NO KEY UPDATE, and a new row version.
        UPDATE ordered_keys AS k SET seq_max = k.seq_max WHERE k.key = o_key;
    ELSE
        PERFORM 1 FROM ordered_keys AS k WHERE k.key = o_key FOR SHARE;
    END IF;
END
$$;
