package failover_test

import (
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/pgcluster"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
)

// failoverRun is what one run through a failover saw.
type failoverRun struct {
	killedAt, promotedAt time.Time
	// Acknowledged before the kill, and missing on the promoted standby right after promotion.
	enqAckedBefore, compAckedBefore int
	lostEnqueues, lostCompletions   []history.ID
	// lostAtEnd are the acknowledged enqueues missing at the end: lostEnqueues, and those whose
	// acknowledgement was on its way when the old primary died.
	lostAtEnd []history.ID
	// rerunAfterAck are the events of which an attempt began after their completion had been
	// acknowledged: that completion was lost.
	rerunAfterAck map[history.ID]bool
	// firstClaim and firstEnqueue are the first claim and the first acknowledged enqueue on
	// the new primary.
	firstClaim, firstEnqueue time.Time
	jobs                     map[history.ID]jobState
	effects                  []history.Effect
	starts                   []start
	enqAcked                 map[history.ID]time.Time
}

// runFailover runs producers and a worker on a multi-host URL over the rig's primary and
// standby, kills the primary mid-run, promotes the standby, and lets the same producers and
// worker carry on until every event on the new primary is done.
func runFailover(t *testing.T, r *rig) *failoverRun {
	url := pgcluster.MultiHostURL(r.primary, r.standby)
	workerPool := r.pool(url, "failover-worker", 8)
	producerPool := r.pool(url, "failover-producer", 8)
	producer, err := ordered.NewClient(producerPool, r.clientConfig())
	require.NoError(t, err)
	stopWorker := r.startWorker(workerPool)

	const producers, keysEach = 4, 4
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.produce(producer, producerPool, keyNames(p, keysEach), stop)
		}()
	}
	stopProducers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopProducers)

	r.waitFor(time.Minute, "work acknowledged before the kill", func() bool {
		return len(r.rec.completionsAcked()) >= 150 && len(r.rec.enqueuesAcked()) >= 200
	})
	run := &failoverRun{killedAt: time.Now()}
	r.rec.killed.Store(true)
	require.NoError(t, r.primary.Kill())
	// Until the promotion no server takes writes: whatever the clients saw acknowledged until
	// now came from the old primary.
	enqBefore, compBefore := r.rec.enqueuesAcked(), r.rec.completionsAcked()
	run.enqAckedBefore, run.compAckedBefore = len(enqBefore), len(compBefore)
	require.NoError(t, r.standby.Promote(r.ctx))
	run.promotedAt = time.Now()

	after := readJobs(r.ctx, t, r.standby.URL())
	for id := range enqBefore {
		if _, ok := after[id]; !ok {
			run.lostEnqueues = append(run.lostEnqueues, id)
		}
	}
	for id := range compBefore {
		if after[id].Status != "done" {
			run.lostCompletions = append(run.lostCompletions, id)
		}
	}

	// The same producers and worker go on against the new primary.
	r.waitFor(time.Minute, "enqueues acknowledged by the new primary", func() bool {
		n := 0
		for _, at := range r.rec.enqueuesAcked() {
			if at.After(run.promotedAt) {
				n++
			}
		}
		return n >= 100
	})
	stopProducers()
	r.waitFor(time.Minute, "every job on the new primary done", func() bool {
		jobs := readJobs(r.ctx, t, r.standby.URL())
		for _, j := range jobs {
			if j.Status != "done" {
				return false
			}
		}
		return len(jobs) > 0
	})
	// The worker's listener, cut by the kill, listens again on the new primary.
	r.waitFor(time.Minute, "the worker listening on the new primary", func() bool {
		return listening(r.ctx, t, r.standby.URL(), "failover-worker")
	})
	stopWorker()

	run.jobs = readJobs(r.ctx, t, r.standby.URL())
	run.effects = readEffects(r.ctx, t, r.standby.URL())
	run.starts = r.rec.allStarts()
	run.enqAcked = r.rec.enqueuesAcked()
	acks := r.rec.completionsAcked()
	for id := range run.enqAcked {
		if _, ok := run.jobs[id]; !ok {
			run.lostAtEnd = append(run.lostAtEnd, id)
		}
	}
	run.rerunAfterAck = map[history.ID]bool{}
	for _, s := range run.starts {
		if a, ok := acks[s.ID]; ok && s.began.After(a.at) {
			run.rerunAfterAck[s.ID] = true
		}
	}
	claim, ok := r.rec.firstOn("claim", r.standby.Port())
	require.True(t, ok, "the worker never claimed on the new primary")
	run.firstClaim = claim.at
	enq, ok := r.rec.firstOn("enqueue", r.standby.Port())
	require.True(t, ok, "no enqueue succeeded on the new primary")
	run.firstEnqueue = enq.at
	require.Zero(t, ordersWithoutEvents(r.ctx, t, r.standby.URL()),
		"a business row and its event did not survive together")

	t.Logf("kill → promotion returned %v; kill → first claim on the new primary %v (promotion → %v); "+
		"kill → first enqueue on it %v (promotion → %v)",
		run.promotedAt.Sub(run.killedAt).Round(time.Millisecond),
		run.firstClaim.Sub(run.killedAt).Round(time.Millisecond), run.firstClaim.Sub(run.promotedAt).Round(time.Millisecond),
		run.firstEnqueue.Sub(run.killedAt).Round(time.Millisecond), run.firstEnqueue.Sub(run.promotedAt).Round(time.Millisecond))
	t.Logf("acknowledged before the kill: %d enqueues (%d lost), %d completions (%d lost); "+
		"events run again after their completion was acknowledged: %d; jobs %d, attempts %d, effects %d; "+
		"failed enqueue tries %d; claims failed %d",
		run.enqAckedBefore, len(run.lostEnqueues), run.compAckedBefore, len(run.lostCompletions), len(run.rerunAfterAck),
		len(run.jobs), len(run.starts), len(run.effects), r.rec.enqFailures, r.logs.count("claim failed"))
	return run
}

// historyOf is the run's history on the new primary: the events it has, their final states,
// the attempts claimed after since (all of them when since is zero) and the effects it has.
// A claim is timed by the database's clock, which is this machine's: after the kill, only the
// new primary claims.
func (run *failoverRun) historyOf(since time.Time) history.History {
	h := history.History{Effects: run.effects}
	for id, j := range run.jobs {
		h.Enqueued = append(h.Enqueued, id)
		hj := history.Job{ID: id, Status: j.Status}
		if j.FinishedAt != nil {
			hj.FinishedAt = *j.FinishedAt
		}
		h.Jobs = append(h.Jobs, hj)
	}
	sort.Slice(h.Enqueued, func(a, b int) bool { return h.Enqueued[a].String() < h.Enqueued[b].String() })
	for _, s := range run.starts {
		if s.At.After(since) {
			h.Starts = append(h.Starts, s.Start)
		}
	}
	return h
}

// With a synchronous standby, a failover loses nothing the clients saw acknowledged: every
// acknowledged enqueue is on the promoted standby, every acknowledged completion is done
// there, no key runs out of order, effects happen once, and the producers and the worker
// (never restarted) carry on against the new primary by themselves.
func TestFailoverSynchronousLosesNothingAcknowledged(t *testing.T) {
	t.Parallel()
	r := newRig(t, true)
	run := runFailover(t, r)

	require.Empty(t, run.lostEnqueues, "acknowledged enqueues missing on the promoted standby")
	require.Empty(t, run.lostCompletions, "acknowledged completions not done on the promoted standby")
	require.Empty(t, run.rerunAfterAck, "events ran again after their completion was acknowledged")
	require.Empty(t, run.lostAtEnd, "acknowledged events missing at the end")
	report := history.Check(run.historyOf(time.Time{}))
	t.Logf("history: %d events, %d completed, %d re-executions, %d duplicate effects, %d order inversions",
		report.Enqueued, report.Completed, report.ReExecutions, report.DuplicateEffects, report.OrderInversions)
	require.True(t, report.Clean(true), "history not clean: %v", report.Problems)
	require.Equal(t, len(run.jobs), report.Completed)
}

// With an asynchronous standby, a failover loses what the standby had not received: the test
// measures and reports it (acknowledged enqueues gone, acknowledged completions that run
// again), and asserts what holds all the same: among what survived, no key runs out of order
// and effects happen once, and the same producers and worker carry on by themselves.
func TestFailoverAsynchronousReportsWhatIsLost(t *testing.T) {
	t.Parallel()
	r := newRig(t, false)
	run := runFailover(t, r)

	t.Logf("asynchronous replication lost %d acknowledged enqueues %v (%d missing right after the promotion) "+
		"and %d acknowledged completions %v (%d not done right after the promotion): these events ran again",
		len(run.lostAtEnd), firstIDs(run.lostAtEnd), len(run.lostEnqueues),
		len(run.rerunAfterAck), firstIDs(keysOf(run.rerunAfterAck)), len(run.lostCompletions))
	// A lost completion is not lost work: its event runs again.
	for _, id := range run.lostCompletions {
		require.True(t, run.rerunAfterAck[id], "%s: its acknowledged completion was lost and it never ran again", id)
	}
	// What the new primary claimed, against what survived, is in order, and every surviving
	// event has exactly one effect.
	report := history.Check(run.historyOf(run.killedAt))
	require.True(t, report.Clean(true), "history of the survivors not clean: %v", report.Problems)
	require.Equal(t, len(run.jobs), report.Completed)
}

// keysOf returns the ids of a set.
func keysOf(set map[history.ID]bool) []history.ID {
	ids := make([]history.ID, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	return ids
}

// firstIDs formats up to five ids.
func firstIDs(ids []history.ID) []string {
	sort.Slice(ids, func(a, b int) bool { return ids[a].String() < ids[b].String() })
	out := make([]string, 0, 5)
	for _, id := range ids[:min(len(ids), 5)] {
		out = append(out, id.String())
	}
	return out
}
