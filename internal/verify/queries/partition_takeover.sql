SELECT count(*), max(nxt.at) - $2 FROM (
    SELECT DISTINCT ON (key, seq) key, seq, pid, at FROM verify_starts
    WHERE at <= $2 ORDER BY key, seq, at DESC) AS last
JOIN ordered_jobs AS j ON j.key = last.key AND j.seq = last.seq
CROSS JOIN LATERAL (
    SELECT min(s.at) AS at FROM verify_starts AS s
    WHERE s.key = last.key AND s.seq = last.seq AND s.at > $2 AND s.pid <> ALL($1)) AS nxt
WHERE last.pid = ANY($1) AND (j.finished_at IS NULL OR j.finished_at > $2)
