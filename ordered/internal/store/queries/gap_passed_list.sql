-- The ranges passed as gaps, of key $1 (null: of every key), latest first.
-- $1 key    text     one key (null: every key)
-- $2 limit  integer  at most this many ranges
SELECT p.key, p.from_seq, p.to_seq, p.passed_at, p.reason
FROM ordered_gaps_passed AS p
WHERE $1::text IS NULL OR p.key = $1::text
ORDER BY p.passed_at DESC, p.key, p.from_seq DESC
LIMIT $2;
