// Package schema holds the SQL schema of ordered and the migrator that applies it.
//
// Two kinds of file, both embedded in the binary:
//
//   - migrations/NNN_name.sql: tables, indexes and types, applied once each, in version order,
//     and recorded in ordered_migrations. A change to a table is a new migration.
//   - functions/NAME.sql: one SQL function a file (CREATE OR REPLACE FUNCTION NAME, with its SET
//     clauses), applied after the migrations whenever its text changes (by checksum, recorded in
//     ordered_functions). The file holds the function's current definition: a change to it is a
//     diff of that file, and the file never drops anything (a DROP there would run again at
//     every later change of the file, taking the function's grants with it). A change of a
//     signature or result type is a migration that drops the old function and deletes its row
//     of ordered_functions, so that the file is applied again; removing a function is a
//     migration that drops it.
//
// Everything runs in one transaction under an advisory lock, so several processes may migrate
// the same database at once (one applies, the others wait and then find nothing to do), and
// workers running meanwhile see the old definitions or the new ones, never a mix.
//
// Check tells in one round trip whether a database is exactly what this binary embeds:
// ErrNotMigrated when migrations or functions are missing or differ, ErrSchemaNewer when a newer
// version migrated it. Worker.Start and the CLI's queue commands call it before anything else,
// and a running worker at each maintenance pass (it stops itself when another version migrated
// the queue).
// A function file's checksum says that it changed, not which text is newer: so a change of the
// function files comes with a new migration (a comment is enough), by which a binary from
// before the change tells the schema as newer (TestFunctionChangesComeWithAMigration keeps
// their checksum under the latest migration).
//
// Objects are created unqualified, in the first schema of the connection's search_path, so a
// queue can live in any schema (the tests give every test its own). A queue that the
// search_path finds past its first schema is refused by Migrate (its new objects would land
// apart from it) and by Check (a queue created in the first schema would take its place).
package schema
