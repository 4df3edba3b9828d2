package schema

// MigrateTo applies the migrations up to and including version last.
var MigrateTo = migrateTo
