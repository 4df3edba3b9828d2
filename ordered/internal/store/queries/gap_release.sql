-- Passes the lowest missing range of contiguous key $1 now (see ordered_gap_release in the
-- schema): no row when it misses no seq below an open job; ORD09 when it is no contiguous key.
-- $1 key  text  the key
SELECT from_seq, to_seq FROM ordered_gap_release($1::text, 'released');
