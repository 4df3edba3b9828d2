-- The keys waiting on a gap, longest waiting first ($1 null), or the one contiguous key $1,
-- waiting or not: its next seq, its lowest missing range below an open job (null: none), since
-- when it waits, when its gap policy acts (null: never) or blocked it, its open and running
-- jobs (a running batch's later jobs among them). The missing range walks the key's open jobs
-- from its next seq up to the first hole.
-- $1 key    text     one key (null: the keys waiting on a gap)
-- $2 limit  integer  at most this many keys
SELECT k.key, n.next_seq, hole.from_seq, hole.to_seq, g.since, g.blocked_at, g.deadline,
       k.gap_action, counts.open, counts.running
FROM ((SELECT g.key FROM ordered_gaps AS g WHERE $1::text IS NULL ORDER BY g.since, g.key LIMIT $2)
      UNION ALL
      SELECT $1::text WHERE $1::text IS NOT NULL) AS w
JOIN ordered_keys AS k ON k.key = w.key AND k.next_seq IS NOT NULL
CROSS JOIN LATERAL (SELECT ordered_key_next_seq(k.key) AS next_seq) AS n
LEFT JOIN ordered_gaps AS g ON g.key = k.key
LEFT JOIN LATERAL (
    SELECT o.expect AS from_seq, o.seq - 1 AS to_seq
    FROM (SELECT j.seq, n.next_seq + row_number() OVER (ORDER BY j.seq) - 1 AS expect
          FROM ordered_jobs AS j
          WHERE j.key = k.key AND j.status IN ('queued', 'blocked') AND j.seq >= n.next_seq) AS o
    WHERE o.seq > o.expect
    ORDER BY o.seq
    LIMIT 1) AS hole ON true
LEFT JOIN ordered_heads AS h ON h.key = k.key
CROSS JOIN LATERAL (
    SELECT count(*) AS open,
           (CASE WHEN h.state = 'running' THEN 1 ELSE 0 END)
               + (SELECT count(*) FROM ordered_batch_later AS b WHERE b.key = k.key) AS running
    FROM ordered_jobs AS j
    WHERE j.key = k.key AND j.seq >= coalesce(h.seq, n.next_seq) AND j.status IN ('queued', 'blocked')) AS counts
ORDER BY g.since NULLS LAST, k.key;
