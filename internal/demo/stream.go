package demo

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/orderedq/ordered/internal/harness"
	"github.com/orderedq/ordered/ordered"
)

// Stream sizes: customers in the full stream and in the short one (CI).
const (
	Customers      = 240
	CustomersShort = 40
)

// demoPayload is what a demo event carries; its script makes some events flaky and one poison.
type demoPayload struct {
	Customer    string `json:"customer"`
	Event       string `json:"event"`
	AmountCents int    `json:"amount_cents,omitempty"`
	harness.Script
}

// demoLifecycle is the event sequence of one customer's order, repeated.
var demoLifecycle = []string{"order.created", "payment.authorized", "payment.captured", "invoice.paid", "shipment.sent", "shipment.delivered"}

// Stream returns the demo's event stream: customers × a few orders each, in each customer's
// sequence order. It is deterministic: testdata/demo/events.jsonl is Stream(Customers), and
// TestStreamMatchesTestdata keeps the two equal.
func Stream(customers int) []ordered.Event {
	rng := rand.New(rand.NewPCG(42, 7))
	var events []ordered.Event
	poisoned := customers / 3 // one customer's payment capture is poison
	for c := range customers {
		key := fmt.Sprintf("cust-%04d", c)
		orders := 1 + rng.IntN(4)
		seq := int64(0)
		for o := range orders {
			amount := 500 + rng.IntN(50_000)
			for _, name := range demoLifecycle {
				seq++
				p := demoPayload{Customer: key, Event: name, AmountCents: amount}
				if rng.IntN(100) < 3 {
					p.FailAttempts = 1 + rng.IntN(2)
				}
				if c == poisoned && o == 0 && name == "payment.captured" {
					p.Poison, p.FailAttempts = true, 0
				}
				body, _ := json.Marshal(p)
				events = append(events, ordered.Event{Key: key, Seq: seq, Kind: name, Payload: body})
			}
		}
	}
	return events
}

// JSONL renders a stream in the `ordered enqueue` format.
func JSONL(events []ordered.Event) []byte {
	var out []byte
	for _, ev := range events {
		line, _ := json.Marshal(struct {
			Key     string          `json:"key"`
			Seq     int64           `json:"seq"`
			Kind    string          `json:"kind"`
			Payload json.RawMessage `json:"payload"`
		}{ev.Key, ev.Seq, ev.Kind, ev.Payload})
		out = append(append(out, line...), '\n')
	}
	return out
}
