package verify

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/history"
)

// A command's effects file: well-formed lines become effects in line order, a bad line is
// named by its number and what is wrong with it, a line naming no enqueued event is reported,
// and each counts as a violation.
func TestCheckEffectsNamesBadAndUnknownLines(t *testing.T) {
	t.Parallel()
	effects, bad, err := ParseEffects(strings.NewReader("k 0\nk 1 7\n\nk one\nk 2 3 4\nk 9\n"))
	require.NoError(t, err)
	require.Equal(t, []history.Effect{
		{ID: history.ID{Key: "k", Seq: 0}, Order: 1},
		{ID: history.ID{Key: "k", Seq: 1}, ClaimVersion: 7, Order: 2},
		{ID: history.ID{Key: "k", Seq: 9}, Order: 6},
	}, effects)
	require.Equal(t, []string{
		`effects line 4 "k one": SEQ "one" is not an integer`,
		`effects line 5 "k 2 3 4": want KEY SEQ [CLAIM_VERSION], got 4 fields`,
	}, bad)

	h := history.History{Enqueued: []history.ID{{Key: "k", Seq: 0}, {Key: "k", Seq: 1}}}
	for _, id := range h.Enqueued {
		h.Jobs = append(h.Jobs, history.Job{ID: id, Status: "done"})
	}
	rep := CheckEffects(h, effects, bad)
	require.True(t, rep.Recorded)
	require.Equal(t, 1, rep.Unknown)
	require.Equal(t, 2, rep.Malformed)
	require.Zero(t, rep.Missing)
	require.Contains(t, rep.Problems, "effects line 6 names k/9, which was not enqueued")
	require.False(t, rep.clean())
	require.Equal(t, []string{"1 effects naming no event", "2 malformed effect lines"}, rep.violations())
}

// A command that records no effect at all has its starts and completions checked, and its
// done events are neither lost nor missing an effect.
func TestCheckEffectsWithoutEffectsChecksTheJobsOnly(t *testing.T) {
	t.Parallel()
	id := history.ID{Key: "k", Seq: 0}
	rep := CheckEffects(history.History{Enqueued: []history.ID{id}, Jobs: []history.Job{{ID: id, Status: "done"}}}, nil, nil)
	require.False(t, rep.Recorded)
	require.Zero(t, rep.Missing)
	require.Zero(t, rep.LostJobs)
	require.Empty(t, rep.Problems)
	require.True(t, rep.clean())

	rep = CheckEffects(history.History{Enqueued: []history.ID{id}, Jobs: []history.Job{{ID: id, Status: "queued"}}}, nil, nil)
	require.Equal(t, 1, rep.LostJobs)
	require.False(t, rep.clean())
}
