-- ordered_lease_end is when a lease of p_lease taken at p_from ends: p_from + p_lease, rounded
-- up to a grain of a sixteenth of the lease. A key's claims that follow each other within one
-- grain (a completion handing the key to its next job, a renewal) then leave the end as it was,
-- and ordered_heads_leased, the only index on the lease, as it was too: the head row's write
-- stays on its page. A lease is so at most a sixteenth longer than asked.
CREATE OR REPLACE FUNCTION ordered_lease_end(p_from timestamptz, p_lease interval) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT date_bin(p_lease / 16, p_from + p_lease, timestamptz '2000-01-01 00:00:00+00') + p_lease / 16
$$;
COMMENT ON FUNCTION ordered_lease_end(timestamptz, interval) IS
'Internal to ordered: the end of a lease (claims, completions, renewals). Not an interface to call, and it may change in any release. Producers call ordered_enqueue or ordered_enqueue_events (docs/sql.md).';
