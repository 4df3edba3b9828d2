-- A connection keeps its generic plans of these functions until the tables' statistics
-- change, and a queue that was never analysed is planned by its size at that moment. Plans
-- made on an empty queue, by a service that started with it, read ordered_jobs whole to find
-- rows by id. With 100,000 jobs and no ANALYZE since (autovacuum off, or before its next
-- round), every claim and every archival batch scanned the table, and so did an enqueue
-- below a queued head: 66-114 ms against 1.2-2.5 ms with 200,000 jobs over 20,000 keys, in
-- the refresh's two updates and 012's second look. Forbidding sequential scans alone left the
-- refresh's demotion and a REPEATABLE READ enqueue's lock of its heads reading every head
-- through ordered_jobs_heads (a bitmap scan of the whole partial index: 10-26 ms), so those
-- two functions forbid bitmap scans as well. Nothing in them wants either: every lookup is
-- by id or by key, as in ordered_jobs_complete since 009.
-- TestPlansMadeOnAnEmptyQueueDoNotScanItLater plans every operation on an empty queue in a
-- database of its own and fails on any step that then reads over 1,000 rows.
--
-- JIT is off as well: a statement that had no other way would be costed at the disabled
-- scan's penalty, far over jit_above_cost, and compiled at every call.
ALTER FUNCTION ordered_jobs_claim(integer, interval) SET enable_seqscan = off;
ALTER FUNCTION ordered_jobs_claim(integer, interval) SET jit = off;
ALTER FUNCTION ordered_heads_refresh(text[]) SET enable_seqscan = off;
ALTER FUNCTION ordered_heads_refresh(text[]) SET jit = off;
ALTER FUNCTION ordered_enqueue_events(ordered_event[]) SET enable_seqscan = off;
ALTER FUNCTION ordered_enqueue_events(ordered_event[]) SET jit = off;
ALTER FUNCTION ordered_archive(interval, integer) SET enable_seqscan = off;
ALTER FUNCTION ordered_archive(interval, integer) SET jit = off;
ALTER FUNCTION ordered_heads_refresh(text[]) SET enable_bitmapscan = off;
ALTER FUNCTION ordered_enqueue_events(ordered_event[]) SET enable_bitmapscan = off;
-- A later CREATE OR REPLACE of one of these functions drops its settings unless it restates
-- them.
