-- Whether an attempt of the job ($1 key, $2 seq) started with a later claim than $3.
SELECT EXISTS (SELECT 1 FROM orderedtest_verify_starts WHERE key = $1 AND seq = $2 AND claim_version > $3)
