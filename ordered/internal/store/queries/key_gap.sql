-- The gap a contiguous key waits on, if it waits (no row otherwise): since when, when its gap
-- policy acts (null: never) or blocked it, the policy, the key's next seq and its lowest open
-- job's seq; the missing seqs lie between the two. One probe of the key's jobs, whatever its
-- backlog.
-- $1 key  text  the key
SELECT g.since, g.deadline, g.blocked_at, k.gap_action, n.next_seq,
       (SELECT j.seq FROM ordered_jobs AS j
        WHERE j.key = k.key AND j.seq >= n.next_seq AND j.status IN ('queued', 'blocked')
        ORDER BY j.seq LIMIT 1)
FROM ordered_gaps AS g
JOIN ordered_keys AS k ON k.key = g.key
CROSS JOIN LATERAL (SELECT ordered_key_next_seq(k.key) AS next_seq) AS n
WHERE g.key = $1;
