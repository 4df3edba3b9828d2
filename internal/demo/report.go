package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// report prints the outcome and checks per-key order over the recorded effects.
func (d *demo) report(ctx context.Context, client *ordered.Client, run *demoRun) error {
	stats, err := client.Stats(ctx)
	if err != nil {
		return err
	}
	var retries, attempted int64
	if err := d.pool.QueryRow(ctx, retriesSQL).Scan(&retries, &attempted); err != nil {
		return err
	}
	d.say("")
	d.say("report")
	d.say("  events          %d enqueued, %d done, %d failed, %d waiting behind a blocked key", len(d.Events), stats.Done, stats.Failed+stats.Blocked, stats.Queued)
	d.say("  time            %s (%.0f events/s)", run.elapsed.Round(time.Millisecond), float64(stats.Done)/run.elapsed.Seconds())
	d.say("  retries         %d (flaky events, and the jobs of the killed worker)", retries)
	if err := d.reportFailed(ctx, client); err != nil {
		return err
	}
	if err := d.reportCrash(ctx, run); err != nil {
		return err
	}
	check, err := d.checkOrder(ctx)
	if err != nil {
		return err
	}
	d.say("  order check     %d effects over %d keys: %d order violations, %d duplicate effects, %d done jobs without effect",
		check.effects, check.keys, check.violations, check.duplicates, check.missing)
	if check.violations+check.duplicates+check.missing > 0 {
		return errors.New("demo: the order check failed")
	}
	d.say("  result          clean: every customer's events ran once, in order")
	return nil
}

// reportFailed prints each failed job and what the policy did to its key's later jobs.
func (d *demo) reportFailed(ctx context.Context, client *ordered.Client) error {
	failed, err := client.FailedJobs(ctx, ordered.FailedJobsParams{})
	if err != nil {
		return err
	}
	for _, f := range failed {
		var later, laterDone int
		if err := d.pool.QueryRow(ctx, laterJobsSQL, f.Key, f.Seq).Scan(&later, &laterDone); err != nil {
			return err
		}
		d.say("  poison          %s seq %d (%s) failed: %s", f.Key, f.Seq, f.Kind, f.LastError)
		if f.Blocking {
			// The queue is dropped at the end of the run unless kept or served: only then can an
			// operator act on the job.
			act := ""
			switch {
			case d.Serve != nil:
				act = fmt.Sprintf(" (replay or skip job %d on the dashboard)", f.ID)
			case d.Keep:
				act = fmt.Sprintf(" (ordered replay %d / ordered skip %d in the kept schema)", f.ID, f.ID)
			case !d.private:
				act = " (--keep keeps the queue to replay or skip it)"
			}
			d.say("                  policy block: the key is blocked, its %d later events wait%s", later-laterDone, act)
		} else {
			d.say("                  policy skip: kept for investigation, its %d later events ran", laterDone)
		}
	}
	return nil
}

// reportCrash prints how long the jobs of the killed worker took to settle after the kill.
func (d *demo) reportCrash(ctx context.Context, run *demoRun) error {
	if run.killedName == "" {
		return nil
	}
	var lastDone *time.Time
	if err := d.pool.QueryRow(ctx, lastSettledSQL, run.inFlight).Scan(&lastDone); err != nil {
		return err
	}
	takeover := "none were in flight"
	if lastDone != nil {
		takeover = fmt.Sprintf("all settled %.1fs after the kill (lease %s)", lastDone.Sub(run.killedAt).Seconds(), Lease)
	}
	d.say("  crash           %s killed with SIGKILL at %d%%, %d jobs in flight: %s", run.killedName, run.killPercent, len(run.inFlight), takeover)
	return nil
}

type orderCheck struct {
	effects, keys, violations, duplicates, missing int
}

// checkOrder reads the effects in commit order: within a key they must come in increasing
// seq, each once, and every done job must have one.
func (d *demo) checkOrder(ctx context.Context) (orderCheck, error) {
	var c orderCheck
	rows, err := d.pool.Query(ctx, effectsInOrderSQL)
	if err != nil {
		return c, err
	}
	last := map[string]int64{}
	seen := map[string]bool{}
	for rows.Next() {
		var key string
		var seq int64
		if err := rows.Scan(&key, &seq); err != nil {
			return c, err
		}
		c.effects++
		id := key + "/" + fmt.Sprint(seq)
		if seen[id] {
			c.duplicates++
		}
		seen[id] = true
		if prev, ok := last[key]; ok && seq <= prev {
			c.violations++
		}
		last[key] = seq
	}
	if err := rows.Err(); err != nil {
		return c, err
	}
	c.keys = len(last)
	err = d.pool.QueryRow(ctx, missingEffectsSQL).Scan(&c.missing)
	return c, err
}
