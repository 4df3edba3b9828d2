-- Deletes up to $2 done jobs finished more than $1 ago (see ordered_archive in the schema).
SELECT ordered_archive($1::interval, $2);
