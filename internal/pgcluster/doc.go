// Package pgcluster runs a throwaway private PostgreSQL cluster: initdb into a temporary
// directory, a server on a free port of 127.0.0.1 with trust authentication, and nothing left
// behind after Close. It can also listen on more addresses of this host and trust networks
// besides the local one (Options.ListenAddresses, Options.TrustedNets), for clients on other
// hosts such as network namespaces.
//
// It serves the tests that must restart or stop PostgreSQL under a running worker, which they
// cannot do to a shared server, and anything else that needs a database when none is at hand.
// It needs the PostgreSQL server binaries (initdb, pg_ctl, postgres): from PATH, else the
// newest /usr/lib/postgresql/*/bin. It never installs them; Start fails with an error that
// says what is missing.
//
// initdb and postgres refuse to run as root. When the calling process is root, the cluster is
// created and run as the unprivileged user "postgres" (through runuser), which must exist.
//
// A running cluster can make a streaming-replication standby of itself (StartStandby:
// pg_basebackup -R, synchronous or asynchronous), which Promote turns into a primary; Kill
// crashes a server (SIGKILL to its postmaster and the postmaster's process group), and
// MultiHostURL lists servers for a client that must follow a failover.
//
// The server is tuned for tests, not for keeping data: fsync is off, and Stop is an immediate
// shutdown. It runs in a session of its own (pg_ctl detaches it), so it outlives a process
// that exits without calling Close: always Close a Cluster.
package pgcluster
