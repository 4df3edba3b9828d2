SELECT max(nxt.at) - $4
FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS held(key, seq, claim_version)
CROSS JOIN LATERAL (
    SELECT min(s.at) AS at FROM verify_starts AS s
    WHERE s.key = held.key AND s.seq = held.seq AND s.claim_version > held.claim_version
      AND s.pid <> ALL($5)) AS nxt
