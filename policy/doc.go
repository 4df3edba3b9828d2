// Package policy decides what happens when a job fails: how long a retryable failure waits
// before its next attempt (Backoff), and what a permanently failed head job does to the rest of
// its key (Policy).
//
// A key's events run one at a time, in sequence order. When the head job of a key fails for
// good (a permanent error, or no attempts left), the key cannot simply move on unnoticed: the
// policy decides to Block it (later jobs wait until an operator replays or skips the failed
// job) or to Skip (the failed job is kept for investigation and later jobs proceed).
//
//	p := policy.ByKeyPrefix(policy.Skip, map[string]policy.Decision{
//		"acct-": policy.Block, // a ledger must not apply entry 8 without entry 7
//	})
//
// The package imports nothing of ordered, so ordered can default to it without a cycle.
package policy
