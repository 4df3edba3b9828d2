-- Keys that start with $1, in key order after $2, at most $3. The range starts at the prefix
-- (a string sorts at or before its extensions in every collation) and starts_with filters it.
-- $1 prefix  text     the keys' common start
-- $2 after   text     only keys after this one ('' : from the start)
-- $3 limit   integer  at most this many
SELECT key
FROM ordered_keys
WHERE key >= $1 AND key > $2 AND starts_with(key, $1)
ORDER BY key
LIMIT $3;
