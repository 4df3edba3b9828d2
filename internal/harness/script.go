package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// Script is the part of a demo or chaos-run event's payload that says how its handler
// behaves: a flaky event fails its first FailAttempts attempts, a poison event fails for good.
type Script struct {
	FailAttempts int  `json:"fail_attempts,omitempty"`
	Poison       bool `json:"poison,omitempty"`
}

// Play plays a job's script: it fails as the script says, or works for about work (between
// work/2 and 3·work/2) and succeeds.
func Play(ctx context.Context, job *ordered.Job, work time.Duration) error {
	var s Script
	if err := json.Unmarshal(job.Payload, &s); err != nil {
		return ordered.Permanent(fmt.Errorf("payload: %w", err))
	}
	if s.Poison {
		return ordered.Permanent(errors.New("poison event: the payload can never be processed"))
	}
	if job.Attempt <= s.FailAttempts {
		return errors.New("upstream timed out (simulated)")
	}
	select {
	case <-time.After(work/2 + rand.N(work+1)):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
