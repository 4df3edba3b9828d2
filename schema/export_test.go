package schema

// MigrateFS is Migrate with the migrations and functions of another file system.
var MigrateFS = migrate
