-- Contiguous keys (gap-aware ordering). A key whose next_seq is set runs its events in an
-- unbroken sequence: every seq below next_seq has finished (done, or failed and passed) or was
-- passed as a gap, and its head may run only when its seq is next_seq. A key whose next_seq is
-- null orders as it always has: by seq, holes allowed.
ALTER TABLE ordered_keys ADD COLUMN next_seq bigint;
