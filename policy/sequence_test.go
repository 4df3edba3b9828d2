package policy_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/policy"
)

// A Sequence is valid in the default mode (zero) or contiguous with a consistent gap policy;
// Validate names the bad field otherwise.
func TestSequenceValidate(t *testing.T) {
	t.Parallel()
	for _, s := range []policy.Sequence{
		{},
		{Contiguous: true},
		{Contiguous: true, First: 1, Gap: policy.Gap{Action: policy.GapProceed, Timeout: time.Minute}},
		{Contiguous: true, Gap: policy.Gap{Action: policy.GapBlock, Timeout: time.Second}},
	} {
		require.NoError(t, s.Validate(), "%+v", s)
	}
	for want, s := range map[string]policy.Sequence{
		"not Contiguous":         {First: 1},
		"First -1":               {Contiguous: true, First: -1},
		"zero for GapWait":       {Contiguous: true, Gap: policy.Gap{Timeout: time.Second}},
		"positive for proceed":   {Contiguous: true, Gap: policy.Gap{Action: policy.GapProceed}},
		"not a known gap action": {Contiguous: true, Gap: policy.Gap{Action: 7, Timeout: time.Second}},
	} {
		require.ErrorContains(t, s.Validate(), want)
	}
	require.Equal(t, "block", policy.GapBlock.String())
	seq := policy.SequenceFunc(func(key string) policy.Sequence { return policy.Sequence{Contiguous: key == "c"} })
	require.True(t, seq.Sequence("c").Contiguous)
	require.False(t, seq.Sequence("d").Contiguous)
	require.True(t, policy.AllKeys(policy.Sequence{Contiguous: true}).Sequence("x").Contiguous)
}
