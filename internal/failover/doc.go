// Package failover holds the tests of ordered across a PostgreSQL failover: a primary and a
// streaming-replication standby (internal/pgcluster), producers and a worker on a multi-host
// URL, the primary killed and the standby promoted mid-run. It has no code of its own.
package failover
