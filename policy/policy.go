package policy

import (
	"fmt"
	"strings"
)

// Decision is what a permanent failure of a key's head job does to that key.
type Decision int

const (
	// Block keeps the failed job at the head of its key: later jobs of the key wait until an
	// operator replays or skips it.
	Block Decision = iota
	// Skip keeps the failed job for investigation and lets the key's later jobs proceed.
	Skip
)

// String returns "block" or "skip".
func (d Decision) String() string {
	switch d {
	case Block:
		return "block"
	case Skip:
		return "skip"
	default:
		return fmt.Sprintf("Decision(%d)", int(d))
	}
}

// ParseDecision parses "block" or "skip".
func ParseDecision(s string) (Decision, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "block":
		return Block, nil
	case "skip":
		return Skip, nil
	default:
		return 0, fmt.Errorf("policy: unknown failure policy %q (want block or skip)", s)
	}
}

// Failure describes a job that failed for good.
type Failure struct {
	JobID       int64
	Key         string
	Seq         int64
	Kind        string
	Attempts    int
	MaxAttempts int
	// Err is the handler's error; for a job whose worker crashed on every attempt it describes
	// the expired lease.
	Err error
	// Exhausted is true when the job ran out of attempts, false for a permanent error.
	Exhausted bool
	// LeaseExpired is true when the last attempt ended with an expired lease (a crash).
	LeaseExpired bool
}

// Policy decides what a permanently failed head job does to its key.
type Policy interface {
	Decide(f *Failure) Decision
}

// Func adapts a function to a Policy, for decisions by error or by kind:
//
//	policy.Func(func(f *policy.Failure) policy.Decision {
//		if errors.Is(f.Err, errInvalidInvoice) {
//			return policy.Skip
//		}
//		return policy.Block
//	})
type Func func(f *Failure) Decision

// Decide calls f.
func (fn Func) Decide(f *Failure) Decision { return fn(f) }

// Always returns a Policy that decides d for every failure.
func Always(d Decision) Policy { return always(d) }

type always Decision

func (a always) Decide(*Failure) Decision { return Decision(a) }

// ByKeyPrefix returns a Policy that decides by the longest prefix of the failed job's key found
// in rules, and def when none matches.
func ByKeyPrefix(def Decision, rules map[string]Decision) Policy {
	copied := make(map[string]Decision, len(rules))
	for p, d := range rules {
		copied[p] = d
	}
	return Func(func(f *Failure) Decision {
		best, decision := -1, def
		for prefix, d := range copied {
			if len(prefix) > best && strings.HasPrefix(f.Key, prefix) {
				best, decision = len(prefix), d
			}
		}
		return decision
	})
}
