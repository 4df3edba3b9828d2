package schema_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/invariant"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/schema"
)

// A queue of the version before migration 8, with work in every state, is upgraded in place:
// each key's head and its claim move to their own row (ordered_heads), a job a crashed batch
// left running keeps its mark, a contiguous key's next seq is read from its finished jobs once,
// the rows keep every invariant, and a client then runs what is left in each key's order.
func TestMigrate8MovesEachHeadToItsOwnRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := uniqueName("upgrade8")
	newSchema(ctx, t, name)
	pool := schemaPool(ctx, t, name, "")

	// The tables of version 7, without its functions (the rows below are written by hand).
	v7 := migrationsTo(t, 7, fstest.MapFS{"functions": &fstest.MapFile{Mode: fs.ModeDir}})
	applied, err := schema.MigrateFS(ctx, pool, v7)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, applied.Migrations)

	// run: its head claimed, its lease expired. batch: a batch of 1..3 running, expired. crash:
	// a batch that crashed and whose head was recovered (seq 2 left running). blocked: held by
	// its blocked head. done: nothing open. gap: contiguous from 1, 1 and 2 done, 4 waiting
	// on 3 (next_seq as the old version left it: 1).
	_, err = pool.Exec(ctx, `
		INSERT INTO ordered_keys (key, seq_max, next_seq, gap_action) VALUES
			('run', 2, NULL, NULL), ('batch', 4, NULL, NULL), ('crash', 3, NULL, NULL),
			('blocked', 2, NULL, NULL), ('done', 2, NULL, NULL), ('gap', 4, 1, 'wait');
		INSERT INTO ordered_jobs (key, seq, payload, max_attempts, status, head, lease_until, claim_version,
		                          attempts, attempted_at, finished_at, batch_to) VALUES
			('run', 1, '{}', 5, 'running', true, now() - interval '1 second', 3, 2, now() - interval '1 minute', NULL, NULL),
			('run', 2, '{}', 5, 'queued', false, NULL, 0, 0, NULL, NULL, NULL),
			('batch', 1, '{}', 5, 'running', true, now() - interval '1 second', 1, 1, now() - interval '1 minute', NULL, 3),
			('batch', 2, '{}', 5, 'queued', false, NULL, 0, 0, NULL, NULL, NULL),
			('batch', 3, '{}', 5, 'queued', false, NULL, 0, 0, NULL, NULL, NULL),
			('batch', 4, '{}', 5, 'queued', false, NULL, 0, 0, NULL, NULL, NULL),
			('crash', 1, '{}', 5, 'running', true, now() - interval '1 second', 2, 2, now() - interval '1 minute', NULL, NULL),
			('crash', 2, '{}', 5, 'running', false, now() - interval '2 minutes', 1, 1, now() - interval '3 minutes', NULL, NULL),
			('crash', 3, '{}', 5, 'queued', false, NULL, 0, 0, NULL, NULL, NULL),
			('blocked', 1, '{}', 5, 'blocked', true, NULL, 5, 5, now() - interval '1 minute', now(), NULL),
			('blocked', 2, '{}', 5, 'queued', false, NULL, 0, 0, NULL, NULL, NULL),
			('done', 1, '{}', 5, 'done', false, NULL, 1, 1, now(), now(), NULL),
			('done', 2, '{}', 5, 'done', false, NULL, 1, 1, now(), now(), NULL),
			('gap', 1, '{}', 5, 'done', false, NULL, 1, 1, now(), now(), NULL),
			('gap', 2, '{}', 5, 'done', false, NULL, 1, 1, now(), now(), NULL),
			('gap', 4, '{}', 5, 'queued', false, NULL, 0, 0, NULL, NULL, NULL);
		INSERT INTO ordered_gaps (key, since) VALUES ('gap', now());`)
	require.NoError(t, err)

	applied, err = schema.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, versionsFrom(t, 8), applied.Migrations)
	require.NoError(t, schema.Check(ctx, pool))

	type head struct {
		Key          string
		Seq          int64
		State        string
		ClaimVersion int64
		Attempts     int
		BatchTo      *int64
		ClosedTo     int64
	}
	rows, err := pool.Query(ctx, `SELECT key, seq, state, claim_version, attempts, batch_to, closed_to
		FROM ordered_heads ORDER BY key`)
	require.NoError(t, err)
	var heads []head
	for rows.Next() {
		var h head
		require.NoError(t, rows.Scan(&h.Key, &h.Seq, &h.State, &h.ClaimVersion, &h.Attempts, &h.BatchTo, &h.ClosedTo))
		heads = append(heads, h)
	}
	require.NoError(t, rows.Err())
	three := int64(3)
	require.Equal(t, []head{
		{Key: "batch", Seq: 1, State: "running", ClaimVersion: 1, Attempts: 1, BatchTo: &three, ClosedTo: -1},
		{Key: "blocked", Seq: 1, State: "blocked", ClaimVersion: 5, Attempts: 5, ClosedTo: -1},
		{Key: "crash", Seq: 1, State: "running", ClaimVersion: 2, Attempts: 2, ClosedTo: -1},
		{Key: "run", Seq: 1, State: "running", ClaimVersion: 3, Attempts: 2, ClosedTo: -1},
	}, heads, "one head a key with open jobs; done and gap (waiting on 3) have none")
	var statuses, crashed, nextSeq string
	require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(key || '/' || seq || ':' || status, ' ' ORDER BY key, seq)
		FROM ordered_jobs WHERE key IN ('run', 'crash', 'blocked')`).Scan(&statuses))
	require.Equal(t, "blocked/1:blocked blocked/2:queued crash/1:queued crash/2:queued crash/3:queued run/1:queued run/2:queued",
		statuses, "no job row is running: a running claim is its head row's")
	require.NoError(t, pool.QueryRow(ctx, `SELECT string_agg(key || '/' || seq, ' ') FROM ordered_jobs
		WHERE crash_lease_until IS NOT NULL`).Scan(&crashed))
	require.Equal(t, "crash/2", crashed, "the job the crashed batch left running keeps its mark")
	require.NoError(t, pool.QueryRow(ctx, `SELECT next_seq::text FROM ordered_keys WHERE key = 'gap'`).Scan(&nextSeq))
	require.Equal(t, "3", nextSeq, "past the contiguous key's finished jobs")
	broken, err := invariant.Violations(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, broken)

	// What is left runs in each key's order: recovered claims and the batch's jobs one at a
	// time, then the rest; the blocked key and the key waiting on its gap stay held.
	client, err := ordered.NewClient(pool, &ordered.Config{Lease: time.Minute})
	require.NoError(t, err)
	var ran []string
	for range 20 {
		jobs, err := client.Claim(ctx, 10)
		require.NoError(t, err)
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			ran = append(ran, fmt.Sprintf("%s/%d", j.Key, j.Seq))
			require.NoError(t, client.Complete(ctx, j))
		}
	}
	byKey := map[string][]string{}
	for _, r := range ran {
		key, _, _ := strings.Cut(r, "/")
		byKey[key] = append(byKey[key], r)
	}
	require.Equal(t, map[string][]string{
		"run":   {"run/1", "run/2"},
		"batch": {"batch/1", "batch/2", "batch/3", "batch/4"},
		"crash": {"crash/1", "crash/2", "crash/3"},
	}, byKey)
	broken, err = invariant.Violations(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, broken)
}

// A queue migrated by the version before migration 9 loses ordered_head_share (its head lock
// moved into ordered_head_insert), and the migrator forgets it; a single enqueue from
// REPEATABLE READ then runs on the new functions.
func TestMigrate9DropsTheSeparateHeadLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := uniqueName("upgrade9")
	newSchema(ctx, t, name)
	pool := schemaPool(ctx, t, name, "")

	// Version 8: its migrations, today's functions and the one it had besides.
	v8 := olderVersion(t, 8, map[string]string{"ordered_head_share": `
		CREATE OR REPLACE FUNCTION ordered_head_share(p_key text) RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN
		    PERFORM FROM ordered_heads WHERE key = p_key FOR SHARE;
		    RETURN true;
		END
		$$;`})
	applied, err := schema.MigrateFS(ctx, pool, v8)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8}, applied.Migrations)
	require.Contains(t, applied.Functions, "ordered_head_share")

	applied, err = schema.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, versionsFrom(t, 9), applied.Migrations)
	require.NoError(t, schema.Check(ctx, pool))
	var fn *string
	var recorded bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regprocedure('ordered_head_share(text)')::text,
		EXISTS (SELECT FROM ordered_functions WHERE name = 'ordered_head_share')`).Scan(&fn, &recorded))
	require.Nil(t, fn, "the function is dropped")
	require.False(t, recorded, "and forgotten by the migrator")

	client, err := ordered.NewClient(pool, nil)
	require.NoError(t, err)
	for seq := range int64(2) {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		_, err = client.EnqueueTx(ctx, tx, ordered.Event{Key: "k", Seq: seq, Payload: []byte(`{}`)})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	jobs, err := client.Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, int64(0), jobs[0].Seq, "the first event is the key's head")
}

// versionsFrom is the embedded migrations' versions from first on.
func versionsFrom(t *testing.T, first int) []int {
	t.Helper()
	migrations, err := schema.Migrations()
	require.NoError(t, err)
	var versions []int
	for _, m := range migrations {
		if m.Version >= first {
			versions = append(versions, m.Version)
		}
	}
	return versions
}

// A queue migrated by the version before migration 10 keeps its archive cursor, and the new
// ordered_archive walks every key from the first (ordered archive) and from the cursor (a
// worker's maintenance).
func TestMigrate10WalksTheKeysFromAKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := uniqueName("upgrade10")
	newSchema(ctx, t, name)
	pool := schemaPool(ctx, t, name, "")

	// Version 9: its migrations and its ordered_archive (the other functions as today's).
	v9 := olderVersion(t, 9, map[string]string{"ordered_archive": `
		CREATE OR REPLACE FUNCTION ordered_archive(p_older_than interval, p_limit integer) RETURNS integer
		LANGUAGE plpgsql AS $$
		BEGIN
		    RETURN 0;
		END
		$$;`})
	applied, err := schema.MigrateFS(ctx, pool, v9)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, applied.Migrations)
	_, err = pool.Exec(ctx, `UPDATE ordered_archive_cursor SET after_key = 'm'`)
	require.NoError(t, err)

	applied, err = schema.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, versionsFrom(t, 10), applied.Migrations)
	require.Contains(t, applied.Functions, "ordered_archive")
	require.NoError(t, schema.Check(ctx, pool))

	client, err := ordered.NewClient(pool, nil)
	require.NoError(t, err)
	_, err = client.Enqueue(ctx, ordered.Event{Key: "k", Seq: 1})
	require.NoError(t, err)
	jobs, err := client.Claim(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, client.Complete(ctx, jobs[0]))
	n, err := client.Archive(ctx, ordered.ArchiveParams{All: true})
	require.NoError(t, err)
	require.Equal(t, 1, n, "k, behind the cursor")
	n, err = client.Archive(ctx, ordered.ArchiveParams{})
	require.NoError(t, err)
	require.Zero(t, n)
	var after string
	require.NoError(t, pool.QueryRow(ctx, `SELECT after_key FROM ordered_archive_cursor`).Scan(&after))
	require.Equal(t, "m", after, "round the keys from the cursor, back to it")
}

// olderVersion is the schema of an older version: the embedded migrations up to last, and
// today's functions but where own gives that version's (by name; an extra one too).
func olderVersion(t *testing.T, last int, own map[string]string) fstest.MapFS {
	t.Helper()
	fsys := migrationsTo(t, last, fstest.MapFS{})
	functions, err := schema.Functions()
	require.NoError(t, err)
	for _, f := range functions {
		fsys["functions/"+f.Name+".sql"] = &fstest.MapFile{Data: []byte(f.SQL)}
	}
	for name, sql := range own {
		fsys["functions/"+name+".sql"] = &fstest.MapFile{Data: []byte(sql)}
	}
	return fsys
}

// migrationsTo adds the embedded migrations up to version last to fsys, as an older version
// of the schema had them, and returns it.
func migrationsTo(t *testing.T, last int, fsys fstest.MapFS) fstest.MapFS {
	t.Helper()
	migrations, err := schema.Migrations()
	require.NoError(t, err)
	for _, m := range migrations {
		if m.Version <= last {
			fsys[fmt.Sprintf("migrations/%03d_%s.sql", m.Version, m.Name)] = &fstest.MapFile{Data: []byte(m.SQL)}
		}
	}
	return fsys
}
