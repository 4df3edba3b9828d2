package schema_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/schema"
)

// definition is what a function file declares: its name, its SET clauses in order, and the
// body between its dollar quotes.
type definition struct {
	name   string
	config []string
	body   string
}

var (
	createRE = regexp.MustCompile(`(?m)^CREATE OR REPLACE FUNCTION (\w+)\(`)
	setRE    = regexp.MustCompile(`(?m)^SET (\w+) (?:= (\S+)|FROM CURRENT)$`)
	dropRE   = regexp.MustCompile(`(?mi)^\s*DROP\s`)
)

func parseDefinition(t *testing.T, f schema.Function) definition {
	t.Helper()
	creates := createRE.FindAllStringSubmatch(f.SQL, -1)
	require.Len(t, creates, 1, "functions/%s.sql defines one function", f.Name)
	require.Equal(t, f.Name, creates[0][1], "functions/%s.sql is named after its function", f.Name)
	require.NotRegexp(t, dropRE, f.SQL, "functions/%s.sql drops nothing: a migration does (schema/doc.go)", f.Name)
	head, rest, ok := strings.Cut(f.SQL, "AS $$")
	require.True(t, ok, "functions/%s.sql: AS $$ ... $$;", f.Name)
	body, _, ok := strings.Cut(rest, "$$;")
	require.True(t, ok, "functions/%s.sql: AS $$ ... $$;", f.Name)
	d := definition{name: f.Name, config: []string{}, body: body}
	for _, m := range setRE.FindAllStringSubmatch(head, -1) {
		d.config = append(d.config, m[1]+"="+m[2])
	}
	return d
}

// Every function of a migrated schema is defined by exactly one file, with the body and the
// settings (proconfig) of that file: a migration that replaced a function without its SET
// clauses, or altered one behind its file's back, fails here.
func TestFunctionsMatchTheirFiles(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	fns, err := schema.Functions()
	require.NoError(t, err)
	files := map[string]definition{}
	for _, f := range fns {
		d := parseDefinition(t, f)
		for i, c := range d.config {
			if c == "search_path=" { // SET search_path FROM CURRENT: the migrator's, the queue's schema
				d.config[i] += q.Schema
			}
		}
		files[f.Name] = d
	}

	rows, err := q.Pool.Query(ctx, `SELECT p.proname, p.prosrc, coalesce(p.proconfig, '{}')
		FROM pg_proc AS p WHERE p.pronamespace = current_schema()::regnamespace ORDER BY p.proname`)
	require.NoError(t, err)
	seen := map[string]bool{}
	var name, src string
	var config []string
	_, err = pgx.ForEachRow(rows, []any{&name, &src, &config}, func() error {
		require.False(t, seen[name], "%s is overloaded: one function a name", name)
		seen[name] = true
		d, ok := files[name]
		require.True(t, ok, "%s has no file in schema/functions", name)
		require.Equal(t, d.body, src, "%s: body differs from functions/%s.sql", name, name)
		require.Equal(t, d.config, config, "%s: settings differ from functions/%s.sql", name, name)
		return nil
	})
	require.NoError(t, err)
	for n := range files {
		require.True(t, seen[n], "functions/%s.sql defines no function of the schema", n)
	}
}

// fsWith is the embedded schema with extra or changed files.
func fsWith(t *testing.T, changes map[string]string) fstest.MapFS {
	t.Helper()
	fsys := fstest.MapFS{}
	ms, err := schema.Migrations()
	require.NoError(t, err)
	for _, m := range ms {
		fsys[fmt.Sprintf("migrations/%03d_%s.sql", m.Version, m.Name)] = &fstest.MapFile{Data: []byte(m.SQL)}
	}
	fns, err := schema.Functions()
	require.NoError(t, err)
	for _, f := range fns {
		fsys["functions/"+f.Name+".sql"] = &fstest.MapFile{Data: []byte(f.SQL)}
	}
	for name, text := range changes {
		fsys[name] = &fstest.MapFile{Data: []byte(text)}
	}
	return fsys
}

func functionText(t *testing.T, name string) string {
	t.Helper()
	fns, err := schema.Functions()
	require.NoError(t, err)
	for _, f := range fns {
		if f.Name == name {
			return f.SQL
		}
	}
	t.Fatalf("no function file %s", name)
	return ""
}

// A changed function file is applied again, and only that one; the same text twice is not.
func TestMigrateReappliesOnlyChangedFunctions(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()

	again, err := schema.Migrate(ctx, q.Pool)
	require.NoError(t, err)
	require.Empty(t, again.Migrations)
	require.Empty(t, again.Functions)

	changed := strings.Replace(functionText(t, "ordered_job_skip"), "BEGIN", "BEGIN\n    -- changed", 1)
	fsys := fsWith(t, map[string]string{"functions/ordered_job_skip.sql": changed})
	applied, err := schema.MigrateFS(ctx, q.Pool, fsys)
	require.NoError(t, err)
	require.Empty(t, applied.Migrations)
	require.Equal(t, []string{"ordered_job_skip"}, applied.Functions)
	var src string
	require.NoError(t, q.Pool.QueryRow(ctx, `SELECT prosrc FROM pg_proc
		WHERE proname = 'ordered_job_skip' AND pronamespace = current_schema()::regnamespace`).Scan(&src))
	require.Contains(t, src, "-- changed")

	applied, err = schema.MigrateFS(ctx, q.Pool, fsys)
	require.NoError(t, err)
	require.Empty(t, applied.Functions)

	// Back to the embedded text: applied again.
	applied, err = schema.Migrate(ctx, q.Pool)
	require.NoError(t, err)
	require.Equal(t, []string{"ordered_job_skip"}, applied.Functions)
}

// A changed function file is applied with CREATE OR REPLACE: the function keeps the grants an
// operator gave on it.
func TestMigrateKeepsTheGrantsOfChangedFunctions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := uniqueName("ordered_migrate_grants")
	admin := newSchema(ctx, t, name)
	pool := schemaPool(ctx, t, name, "")
	_, err := schema.Migrate(ctx, pool)
	require.NoError(t, err)
	roleName := uniqueName("ordered_grants_role")
	role := newRole(ctx, t, admin, roleName)
	ident := pgx.Identifier{name}.Sanitize()
	for _, sql := range []string{
		"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA " + ident + " FROM PUBLIC",
		"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA " + ident + " TO " + role,
	} {
		_, err = admin.Exec(ctx, sql)
		require.NoError(t, err)
	}

	fns, err := schema.Functions()
	require.NoError(t, err)
	changes := map[string]string{}
	for _, f := range fns {
		changes["functions/"+f.Name+".sql"] = strings.Replace(f.SQL, "$$;", "-- changed\n$$;", 1)
	}
	applied, err := schema.MigrateFS(ctx, pool, fsWith(t, changes))
	require.NoError(t, err)
	require.Len(t, applied.Functions, len(fns))

	var ungranted []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(array_agg(p.proname::text ORDER BY p.proname), '{}')
		FROM pg_proc AS p
		WHERE p.pronamespace = current_schema()::regnamespace
		  AND NOT EXISTS (SELECT 1 FROM aclexplode(p.proacl) AS a
		                  WHERE a.grantee = $1::regrole AND a.privilege_type = 'EXECUTE')`,
		roleName).Scan(&ungranted))
	require.Empty(t, ungranted, "functions that lost the role's grant")
}

// A migration that drops a function (a change of its result type) has it created again from
// its file: an upgrade from a schema with the old definition ends with the file's.
func TestMigrateCreatesAgainAFunctionAMigrationDropped(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	// The schema as the version before migration 7 left it: ordered_jobs_complete_batch
	// without its recovered column, recorded under that text's checksum.
	for _, sql := range []string{
		`DELETE FROM ordered_migrations WHERE version = 7`,
		`DROP FUNCTION ordered_jobs_complete_batch(bigint[], bigint[], integer, integer, interval)`,
		`CREATE FUNCTION ordered_jobs_complete_batch(p_ids bigint[], p_versions bigint[], p_next_limit integer,
		                                             p_batch integer, p_lease interval)
		 RETURNS TABLE (completed boolean, id bigint) LANGUAGE sql AS 'SELECT true, 0::bigint'`,
		`UPDATE ordered_functions SET checksum = 'before 7' WHERE name = 'ordered_jobs_complete_batch'`,
	} {
		_, err := q.Pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	applied, err := schema.Migrate(ctx, q.Pool)
	require.NoError(t, err)
	require.Equal(t, []int{7}, applied.Migrations)
	require.Equal(t, []string{"ordered_jobs_complete_batch"}, applied.Functions)
	var result string
	require.NoError(t, q.Pool.QueryRow(ctx, `SELECT pg_get_function_result(p.oid) FROM pg_proc AS p
		WHERE p.proname = 'ordered_jobs_complete_batch' AND p.pronamespace = current_schema()::regnamespace`).Scan(&result))
	require.Contains(t, result, "recovered boolean")
	require.NoError(t, schema.Check(ctx, q.Pool))
}

// A function whose body does not compile fails the migration, which changes nothing.
func TestMigrateRefusesABrokenFunction(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	broken := strings.Replace(functionText(t, "ordered_job_skip"), "PERFORM", "PERFORMM", 1)
	_, err := schema.MigrateFS(ctx, q.Pool, fsWith(t, map[string]string{
		"migrations/999_extra.sql":       "CREATE TABLE ordered_extra (id int);",
		"functions/ordered_job_skip.sql": broken,
	}))
	require.ErrorContains(t, err, "function ordered_job_skip")
	var extra *string
	require.NoError(t, q.Pool.QueryRow(ctx, `SELECT to_regclass('ordered_extra')::text`).Scan(&extra))
	require.Nil(t, extra, "the migration's table was rolled back with the function")
}

// A new migration is applied to a schema that has the earlier ones, once.
func TestMigrateAppliesANewMigrationOnce(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	fsys := fsWith(t, map[string]string{
		"migrations/999_extra.sql": "ALTER TABLE ordered_keys ADD COLUMN extra text;",
	})
	applied, err := schema.MigrateFS(ctx, q.Pool, fsys)
	require.NoError(t, err)
	require.Equal(t, []int{999}, applied.Migrations)
	applied, err = schema.MigrateFS(ctx, q.Pool, fsys)
	require.NoError(t, err)
	require.Empty(t, applied.Migrations)
}

// Functions are replaced while other sessions call them: the callers never fail.
func TestFunctionsReplacedWhileClaimsRun(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := q.Pool.Exec(ctx, `SELECT * FROM ordered_enqueue('[{"key":"a","seq":1,"max_attempts":3}]')`)
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(q.URL)
	require.NoError(t, err)
	callers, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer callers.Close()

	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				// A claim that takes the job, and a give-back, so the key stays claimable.
				rows, err := callers.Query(ctx, `SELECT id, claim_version FROM ordered_jobs_claim(1, '1 minute')`)
				if err == nil {
					var id, version int64
					var found bool
					for rows.Next() {
						found = true
						err = rows.Scan(&id, &version)
					}
					rows.Close()
					if err == nil {
						err = rows.Err()
					}
					if err == nil && found {
						_, err = callers.Exec(ctx, `UPDATE ordered_heads SET state = 'queued', lease_until = NULL
							WHERE job_id = $1 AND claim_version = $2`, id, version)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range 20 {
		text := strings.Replace(functionText(t, "ordered_jobs_claim"), "BEGIN", fmt.Sprintf("BEGIN\n    -- version %d", i), 1)
		applied, err := schema.MigrateFS(ctx, q.Pool, fsWith(t, map[string]string{"functions/ordered_jobs_claim.sql": text}))
		require.NoError(t, err)
		require.Equal(t, []string{"ordered_jobs_claim"}, applied.Functions)
	}
	close(stop)
	for range 4 {
		require.NoError(t, <-errs)
	}
}

// publicFunctions are the functions producers in any language call (docs/sql.md); every other
// function of the schema is internal, and its comment says so.
var publicFunctions = map[string]bool{"ordered_enqueue": true, "ordered_enqueue_events": true}

// functionComments returns the comment of every function of the current schema, by name ("" for
// none).
func functionComments(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT p.proname, coalesce(obj_description(p.oid, 'pg_proc'), '')
		FROM pg_proc AS p WHERE p.pronamespace = current_schema()::regnamespace`)
	require.NoError(t, err)
	comments := map[string]string{}
	var name, comment string
	_, err = pgx.ForEachRow(rows, []any{&name, &comment}, func() error {
		comments[name] = comment
		return nil
	})
	require.NoError(t, err)
	return comments
}

// Every function has a COMMENT, from its own file, that says whether it is an interface: the
// public ones point to docs/sql.md, the others say they are internal. A file that is applied
// again (its text changed) keeps its comment.
func TestFunctionsHaveComments(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	check := func(t *testing.T) {
		t.Helper()
		comments := functionComments(t, ctx, q.Pool)
		for name := range publicFunctions {
			require.Contains(t, comments, name)
		}
		for name, comment := range comments {
			if publicFunctions[name] {
				require.Contains(t, comment, "docs/sql.md", "%s is public", name)
				require.NotContains(t, comment, "Internal", "%s is public", name)
			} else {
				require.True(t, strings.HasPrefix(comment, "Internal to ordered: "), "%s is internal: %q", name, comment)
			}
		}
	}
	check(t)
	fns, err := schema.Functions()
	require.NoError(t, err)
	for _, f := range fns {
		require.Regexp(t, `(?m)^\$\$;\nCOMMENT ON FUNCTION `+f.Name+`\(`, f.SQL,
			"functions/%s.sql comments its function after the CREATE", f.Name)
	}

	// The comment is the file's: a changed one is applied with the file, and is there after.
	changed := strings.Replace(functionText(t, "ordered_enqueue"), "See docs/sql.md.", "See docs/sql.md. Changed.", 1)
	applied, err := schema.MigrateFS(ctx, q.Pool, fsWith(t, map[string]string{"functions/ordered_enqueue.sql": changed}))
	require.NoError(t, err)
	require.Equal(t, []string{"ordered_enqueue"}, applied.Functions)
	check(t)
	require.True(t, strings.HasSuffix(functionComments(t, ctx, q.Pool)["ordered_enqueue"], "Changed."))
}
