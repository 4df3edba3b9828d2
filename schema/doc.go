// Package schema holds the versioned SQL migrations of ordered and the migrator that applies
// them.
//
// Migrations live in migrations/NNN_name.sql, are embedded in the binary and are applied in
// version order. The migrator records each applied version in ordered_migrations and holds a
// transaction-scoped advisory lock while it works, so several processes may migrate the same
// database at once: one applies, the others wait and then find nothing left to do.
//
// Check tells in one round trip whether a database has exactly this version's migrations:
// ErrNotMigrated when some are missing, ErrSchemaNewer when a newer version migrated it.
// Worker.Start and the CLI's queue commands call it before anything else.
//
// Tables are created unqualified, in the first schema of the connection's search_path, so a
// queue can live in any schema (the tests give every test its own).
package schema
