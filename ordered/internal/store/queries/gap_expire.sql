-- Applies the gap policy of up to $1 keys whose gap stayed open past its timeout, and returns
-- how many (see ordered_gaps_expire in the schema).
-- $1 limit  integer  at most this many keys
SELECT ordered_gaps_expire($1::integer);
