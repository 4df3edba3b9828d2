package policy

import (
	"fmt"
	"time"
)

// GapAction is what a gap of a contiguous key that stays open does (see Gap).
type GapAction int

const (
	// GapWait holds the key until the missing events arrive or an operator releases the gap,
	// however long that takes.
	GapWait GapAction = iota
	// GapProceed passes the gap once it has been open for Gap.Timeout: the missing range is
	// recorded, the key's later events run, and a missing event that arrives afterwards is late.
	GapProceed
	// GapBlock holds the key once the gap has been open for Gap.Timeout, and shows it as
	// blocked for an operator, who releases it (ordered gaps release). A missing event that
	// arrives first fills the gap and the key goes on.
	GapBlock
)

// String returns "wait", "proceed" or "block", the names the database stores.
func (a GapAction) String() string {
	switch a {
	case GapWait:
		return "wait"
	case GapProceed:
		return "proceed"
	case GapBlock:
		return "block"
	default:
		return fmt.Sprintf("GapAction(%d)", int(a))
	}
}

// Gap is the gap policy of a contiguous key.
type Gap struct {
	Action GapAction
	// Timeout is how long a gap stays open before Action applies; it must be positive for
	// GapProceed and GapBlock, and zero for GapWait. It is applied by the workers' maintenance,
	// so a gap may stay open up to one maintenance interval longer.
	Timeout time.Duration
}

// Sequence is how a key's events are ordered. The zero value is the default mode: by seq,
// holes allowed (an event below one that has started is late).
type Sequence struct {
	// Contiguous makes the key gap-aware: its seqs run in an unbroken sequence from First, a
	// job runs only once every lower seq of its key has finished (done, or failed and passed),
	// and a missing seq is a gap that holds the key, as Gap decides.
	Contiguous bool
	// First is the seq of a contiguous key's first event (0 or more; the zero value is 0).
	First int64
	// Gap is what a gap that stays open does.
	Gap Gap
}

// Validate reports what makes s unusable.
func (s Sequence) Validate() error {
	if !s.Contiguous {
		if s != (Sequence{}) {
			return fmt.Errorf("policy: Sequence sets First or Gap but not Contiguous")
		}
		return nil
	}
	switch {
	case s.First < 0:
		return fmt.Errorf("policy: Sequence.First %d must be 0 or more", s.First)
	case s.Gap.Action < GapWait || s.Gap.Action > GapBlock:
		return fmt.Errorf("policy: Sequence.Gap.Action %v is not a known gap action", s.Gap.Action)
	case s.Gap.Action == GapWait && s.Gap.Timeout != 0:
		return fmt.Errorf("policy: Sequence.Gap.Timeout must be zero for GapWait, not %v", s.Gap.Timeout)
	case s.Gap.Action != GapWait && s.Gap.Timeout <= 0:
		return fmt.Errorf("policy: Sequence.Gap.Timeout must be positive for %v, not %v", s.Gap.Action, s.Gap.Timeout)
	}
	return nil
}

// Sequencer gives the Sequence of each key. It is asked when a key's events are enqueued; a
// key keeps the Sequence it had when its first event was enqueued, and an enqueue that asks
// for the other mode is refused (see ordered.ErrSequenceMismatch), so answer the same for a key
// every time.
type Sequencer interface {
	Sequence(key string) Sequence
}

// AllKeys returns a Sequencer that gives s for every key.
func AllKeys(s Sequence) Sequencer { return allKeys(s) }

type allKeys Sequence

func (a allKeys) Sequence(string) Sequence { return Sequence(a) }

// SequenceFunc adapts a function to a Sequencer, for modes by key prefix or tenant.
type SequenceFunc func(key string) Sequence

// Sequence calls f.
func (f SequenceFunc) Sequence(key string) Sequence { return f(key) }
