package policy

import (
	"math/rand/v2"
	"time"
)

// Backoff says how long a job waits after its attempt-th failed attempt (1-based) before it
// may be claimed again.
type Backoff interface {
	Delay(attempt int) time.Duration
}

// Exponential is bounded exponential backoff with jitter: the attempt-th retry waits a random
// duration in [d/2, d], where d = Base·2^(attempt-1) capped at Max. The cap applies after the
// jitter, so no wait exceeds Max; the jitter keeps jobs that failed together from retrying in
// lockstep.
type Exponential struct {
	Base time.Duration
	Max  time.Duration
}

// Defaults of Exponential's zero fields.
const (
	BackoffBaseDefault = time.Second
	BackoffMaxDefault  = time.Hour
)

// Delay implements Backoff.
func (e Exponential) Delay(attempt int) time.Duration {
	base, ceiling := e.Base, e.Max
	if base <= 0 {
		base = BackoffBaseDefault
	}
	if ceiling <= 0 {
		ceiling = BackoffMaxDefault
	}
	if attempt < 1 {
		attempt = 1
	}
	d := ceiling
	if shift := attempt - 1; shift < 62 && base <= ceiling>>shift {
		d = base << shift
	}
	half := d / 2
	return half + rand.N(d-half+1)
}
