package policy_test

import (
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/policy"
)

// ---------------------------------------------------------------------------------------------
// 14. Decisions.

func TestParseDecisionAcceptsBlockAndSkipInAnyCase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]policy.Decision{
		"block": policy.Block, "BLOCK": policy.Block, "Block": policy.Block, " bLoCk\t": policy.Block,
		"skip": policy.Skip, "SKIP": policy.Skip, "Skip": policy.Skip, "sKiP ": policy.Skip,
	} {
		got, err := policy.ParseDecision(in)
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, got, "%q", in)
	}
}

func TestParseDecisionRejectsOtherValuesNamingThem(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "blok", "blocks", "retry", "skip it", "0", "1", "Decision(0)"} {
		_, err := policy.ParseDecision(in)
		require.Error(t, err, "%q", in)
		require.Contains(t, err.Error(), `"`+in+`"`, "the error names the value")
	}
}

func TestDecisionString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "block", policy.Block.String())
	require.Equal(t, "skip", policy.Skip.String())
	require.Equal(t, "Decision(7)", policy.Decision(7).String())
	require.Equal(t, "Decision(-1)", policy.Decision(-1).String())
	for _, d := range []policy.Decision{policy.Block, policy.Skip} {
		back, err := policy.ParseDecision(d.String())
		require.NoError(t, err)
		require.Equal(t, d, back, "String and ParseDecision round-trip")
	}
	require.NotEqual(t, policy.Block, policy.Skip)
}

// ---------------------------------------------------------------------------------------------
// 15. Policies.

func TestByKeyPrefixPicksTheLongestMatchingPrefix(t *testing.T) {
	t.Parallel()
	rules := map[string]policy.Decision{
		"a":          policy.Skip,
		"acct-":      policy.Block,
		"acct-vip-":  policy.Skip,
		"acct-vip-x": policy.Block,
		"n":          policy.Block,
		"notify-":    policy.Skip,
	}
	cases := map[string]policy.Decision{
		"acct-1":      policy.Block, // "acct-" over "a"
		"acct-vip-1":  policy.Skip,  // "acct-vip-" over "acct-" and "a"
		"acct-vip-x1": policy.Block, // "acct-vip-x" over all the others
		"alpha":       policy.Skip,  // only "a"
		"acc":         policy.Skip,  // "acct-" is longer than the key: only "a"
		"notify-1":    policy.Skip,  // "notify-" over "n"
		"nope":        policy.Block, // only "n"
		"zeta":        policy.Block, // none: the default
		"":            policy.Block, // none: the default
		"Acct-1":      policy.Block, // prefixes are case-sensitive: the default
	}
	p := policy.ByKeyPrefix(policy.Block, rules)
	// Map iteration order varies from run to run: decide each key many times.
	for range 50 {
		for key, want := range cases {
			require.Equal(t, want, p.Decide(&policy.Failure{Key: key}), "key %q", key)
		}
	}

	// The other default.
	q := policy.ByKeyPrefix(policy.Skip, map[string]policy.Decision{"acct-": policy.Block})
	require.Equal(t, policy.Skip, q.Decide(&policy.Failure{Key: "notify-1"}))
	require.Equal(t, policy.Block, q.Decide(&policy.Failure{Key: "acct-1"}))

	// No rules at all: always the default.
	require.Equal(t, policy.Skip, policy.ByKeyPrefix(policy.Skip, nil).Decide(&policy.Failure{Key: "acct-1"}))
	require.Equal(t, policy.Block, policy.ByKeyPrefix(policy.Block, nil).Decide(&policy.Failure{Key: "acct-1"}))

	// The rules are copied: changing the map afterwards does not change the policy.
	rules["zeta"] = policy.Skip
	delete(rules, "acct-")
	require.Equal(t, policy.Block, p.Decide(&policy.Failure{Key: "zeta"}))
	require.Equal(t, policy.Block, p.Decide(&policy.Failure{Key: "acct-1"}))
}

func TestFuncAdaptsAFunction(t *testing.T) {
	t.Parallel()
	errInvalid := errors.New("invalid invoice")
	var got []*policy.Failure
	p := policy.Func(func(f *policy.Failure) policy.Decision {
		got = append(got, f)
		if errors.Is(f.Err, errInvalid) {
			return policy.Skip
		}
		return policy.Block
	})
	var asPolicy policy.Policy = p

	f1 := &policy.Failure{JobID: 1, Key: "k", Seq: 2, Err: errInvalid}
	f2 := &policy.Failure{JobID: 3, Key: "k", Seq: 4, Err: errors.New("other")}
	require.Equal(t, policy.Skip, asPolicy.Decide(f1))
	require.Equal(t, policy.Block, asPolicy.Decide(f2))
	require.Equal(t, []*policy.Failure{f1, f2}, got, "the function sees each failure as given")
}

func TestAlwaysDecidesTheSameForEveryFailure(t *testing.T) {
	t.Parallel()
	failures := []*policy.Failure{
		{},
		{Key: "acct-1", Seq: 1, Err: errors.New("boom")},
		{Key: "notify-1", Exhausted: true, LeaseExpired: true, Attempts: 25, MaxAttempts: 25},
	}
	for _, d := range []policy.Decision{policy.Block, policy.Skip} {
		p := policy.Always(d)
		for _, f := range failures {
			require.Equal(t, d, p.Decide(f), "Always(%v) on %+v", d, f)
		}
	}
}

// ---------------------------------------------------------------------------------------------
// 16. Backoff.

// ceilingOf is min(base·2^(attempt-1), max), computed without overflow.
func ceilingOf(base, ceiling time.Duration, attempt int) time.Duration {
	d := new(big.Int).Lsh(big.NewInt(int64(base)), uint(attempt-1))
	if d.Cmp(big.NewInt(int64(ceiling))) > 0 {
		return ceiling
	}
	return time.Duration(d.Int64())
}

func TestExponentialDelayStaysWithinItsBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		e         policy.Exponential
		base, max time.Duration // the effective values
	}{
		{policy.Exponential{Base: time.Millisecond, Max: time.Second}, time.Millisecond, time.Second},
		{policy.Exponential{Base: 3, Max: 1001}, 3, 1001}, // odd nanoseconds
		{policy.Exponential{Base: 100 * time.Millisecond, Max: 30 * time.Minute}, 100 * time.Millisecond, 30 * time.Minute},
		{policy.Exponential{Base: 10 * time.Second, Max: time.Second}, 10 * time.Second, time.Second}, // Base over Max
		{policy.Exponential{Base: time.Hour, Max: 1<<63 - 1}, time.Hour, 1<<63 - 1},                   // no overflow
		// Zero (and negative) fields take the defaults.
		{policy.Exponential{}, policy.BackoffBaseDefault, policy.BackoffMaxDefault},
		{policy.Exponential{Max: time.Minute}, policy.BackoffBaseDefault, time.Minute},
		{policy.Exponential{Base: time.Millisecond}, time.Millisecond, policy.BackoffMaxDefault},
		{policy.Exponential{Base: -time.Second, Max: -time.Second}, policy.BackoffBaseDefault, policy.BackoffMaxDefault},
	}
	for _, tc := range cases {
		for attempt := 1; attempt <= 40; attempt++ {
			d := ceilingOf(tc.base, tc.max, attempt)
			for range 20 {
				got := tc.e.Delay(attempt)
				require.GreaterOrEqual(t, got, d/2, "%+v attempt %d", tc.e, attempt)
				require.LessOrEqual(t, got, d, "%+v attempt %d", tc.e, attempt)
				require.LessOrEqual(t, got, tc.max, "%+v attempt %d: never over Max", tc.e, attempt)
				require.Positive(t, got, "%+v attempt %d", tc.e, attempt)
			}
		}
		// Out-of-range attempts are never negative nor over Max either.
		for _, attempt := range []int{0, -1, 64, 1000, 1 << 30} {
			got := tc.e.Delay(attempt)
			require.GreaterOrEqual(t, got, time.Duration(0), "%+v attempt %d", tc.e, attempt)
			require.LessOrEqual(t, got, tc.max, "%+v attempt %d", tc.e, attempt)
		}
	}

	// The defaults are the documented ones: 1s doubling to 1h.
	require.Equal(t, time.Second, policy.BackoffBaseDefault)
	require.Equal(t, time.Hour, policy.BackoffMaxDefault)
}

func TestExponentialDelayHasJitter(t *testing.T) {
	t.Parallel()
	e := policy.Exponential{Base: time.Millisecond, Max: time.Hour}
	const attempt, samples = 5, 200
	d := ceilingOf(time.Millisecond, time.Hour, attempt) // 16ms
	seen := map[time.Duration]bool{}
	lo, hi := time.Duration(1<<63-1), time.Duration(0)
	for range samples {
		got := e.Delay(attempt)
		seen[got] = true
		lo, hi = min(lo, got), max(hi, got)
	}
	require.Greater(t, len(seen), 1, "200 delays of one attempt are not all equal")
	// The jitter spans [d/2, d], not a sliver of it (each check fails with probability 0.8^200).
	require.Less(t, lo, d/2+d/10, "some delays fall near d/2")
	require.Greater(t, hi, d-d/10, "some delays fall near d")
}
