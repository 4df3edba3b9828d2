-- Queued jobs, for admission control: the open jobs of the keys that have a head (from the
-- head on) or wait on a gap (from their next seq on), less the running heads. It reads the
-- open jobs, never a key's finished history.
SELECT coalesce(sum(n.queued), 0) - (SELECT count(*) FROM ordered_heads WHERE state = 'running')
FROM (SELECT h.key, h.seq FROM ordered_heads AS h
      UNION ALL
      SELECT g.key, ordered_key_next_seq(g.key) FROM ordered_gaps AS g) AS k
CROSS JOIN LATERAL (SELECT count(*) AS queued FROM ordered_jobs AS o
                    WHERE o.key = k.key AND o.seq >= k.seq AND o.status = 'queued') AS n;
