package ordered_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
)

// The database checks events by the client's rules, with the client's limits, and its error
// (ORD07) becomes the same *InvalidEventError that Validate returns: a Go caller gets one
// error whichever side found the problem.
func TestDatabaseRefusesInvalidEventsAsTheClientDoes(t *testing.T) {
	t.Parallel()
	cfg := &ordered.Config{MaxKeyBytes: 10, MaxPayloadBytes: 20, MaxAttempts: 7}
	b := setup(t, cfg)
	for _, tc := range []struct {
		name string
		ev   ordered.Event
	}{
		{"empty key", ordered.Event{Key: "", Seq: 1}},
		{"key over the limit", ordered.Event{Key: strings.Repeat("k", 11), Seq: 1}},
		{"control character in key", ordered.Event{Key: "a\u009fb", Seq: 1}},
		{"negative seq", ordered.Event{Key: "k", Seq: -3}},
		{"seq over MaxSeq", ordered.Event{Key: "k", Seq: ordered.MaxSeq + 1}},
		{"control character in kind", ordered.Event{Key: "k", Seq: 1, Kind: "a\tb"}},
		{"kind over the limit", ordered.Event{Key: "k", Seq: 1, Kind: strings.Repeat("x", 11)}},
		{"run_at beyond 9999", ordered.Event{Key: "k", Seq: 1, RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{"run_at beyond 9999 in UTC only", ordered.Event{Key: "k", Seq: 1, RunAt: time.Date(9999, 12, 31, 23, 30, 0, 0, time.FixedZone("", -3600))}},
		{"run_at before year 1 in UTC only", ordered.Event{Key: "k", Seq: 1, RunAt: time.Date(1, 1, 1, 0, 30, 0, 0, time.FixedZone("", 3600))}},
		{"negative max_attempts", ordered.Event{Key: "k", Seq: 1, MaxAttempts: -1}},
		{"payload over the limit", ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(`"` + strings.Repeat("p", 19) + `"`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := []ordered.Event{validEvent("good", 1), tc.ev}
			want := b.client.Validate(evs)
			var invalid *ordered.InvalidEventError
			require.ErrorAs(t, want, &invalid)
			var runAt *time.Time
			if !tc.ev.RunAt.IsZero() {
				runAt = &tc.ev.RunAt
			}
			var payload *string
			if tc.ev.Payload != nil {
				p := string(tc.ev.Payload)
				payload = &p
			}
			_, err := b.pool.Exec(b.ctx, `SELECT * FROM ordered_enqueue_events(ARRAY[
				ROW('good', 1, NULL, '{}', NULL, NULL)::ordered_event,
				ROW($1::text, $2::bigint, $3::text, $4::jsonb, $5::timestamptz, $6::integer)::ordered_event], 10, 20, 7)`,
				tc.ev.Key, tc.ev.Seq, tc.ev.Kind, payload, runAt, tc.ev.MaxAttempts)
			got := ordered.MapDBError(err)
			require.ErrorIs(t, got, ordered.ErrInvalidEvent, "%v", err)
			require.Equal(t, want, got)
			require.Equal(t, want.Error(), got.Error())
		})
	}
	require.Zero(t, b.jobRowCount(t))
}
