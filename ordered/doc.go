// Package ordered turns a PostgreSQL table into a per-key ordered event processor.
//
// Producers enqueue events that carry a key (a customer, an account, a conversation) and their
// own sequence number. Workers process events concurrently, but the events of one key run one
// at a time, in sequence order, through crashes, retries, stale workers and restarts.
//
// # Enqueue
//
// Client.Enqueue and Client.EnqueueMany write events in a transaction of their own;
// Client.EnqueueTx (pgx), Client.EnqueueSQLTx (database/sql) and orderedbun.Enqueue (bun)
// write them inside the caller's, so a business change and its event commit or roll back
// together. A batch is all or nothing. An event already enqueued is a no-op
// (EnqueueResult.Duplicate); one whose seq is below a job of its key that has started is
// refused (ErrLateEvent); bad input is refused (ErrInvalidEvent).
//
// # Process
//
// A Worker (Client.NewWorker) runs a Handler over the jobs: it claims only what it can start,
// renews leases while handlers run, retries failures with backoff, hands permanent failures to
// the policy (package policy: block the key or skip the job), wakes on LISTEN/NOTIFY, and does
// the queue's maintenance. A TxHandlerFunc commits its effect together with the completion.
//
// The same steps are available by hand: Client.Claim, then Complete, Retry, RetryAfter, Fail
// and Renew, each fenced by the claim: a stale worker gets ErrLeaseLost, never success. Their
// Tx twins (CompleteTx, RetryTx, RetryAfterTx, FailTx) settle the job inside the caller's
// transaction, and a lost claim aborts that transaction.
//
// # Operate
//
// Client.FailedJobs, BlockedKeys, Replay, Skip, Archive and Stats are the admin operations
// (ReplayTx and SkipTx inside the caller's transaction); the ordered command exposes them on
// the command line. Package schema migrates the database, package orderedtest gives tests a
// fresh queue, and package history checks recorded runs.
//
// # Connection poolers
//
// Behind a session-mode pooler nothing changes. Behind a transaction-mode pooler (PgBouncer
// pool_mode = transaction) set Config.Pooler to PoolerTransaction: the client's statements
// then keep nothing on the server between round trips, and workers poll instead of
// listening. A worker needs its pool's connections plus one LISTEN connection of its own
// (none when it polls).
package ordered
