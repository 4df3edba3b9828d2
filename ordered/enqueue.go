package ordered

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/ordered/internal/store"
	"github.com/orderedq/ordered/policy"
)

// MaxSeq is the largest seq of an event: the seq after it, which a key's bookkeeping holds
// (the next seq of a contiguous key, the first seq above a finished one), must fit a bigint.
const MaxSeq = math.MaxInt64 - 1

// Event is one event to enqueue. Its key's events run one at a time, in Seq order.
type Event struct {
	// Key groups events that must run in order: a customer, an account, a conversation.
	Key string
	// Seq is the producer's sequence number within Key (0 to MaxSeq). The pair (Key, Seq) is the
	// event's identity: enqueuing it again with the same content is a no-op, with different
	// content an error (see ErrDuplicateConflict).
	Seq int64
	// Kind names what the event is, for handlers and operators ("invoice.paid").
	Kind string
	// Payload is the event's JSON document; nil (or empty) means JSON null. It is stored as
	// jsonb, so it must be one jsonb holds as sent: an object names each member once (jsonb
	// would keep the last of a repeated name), and every number fits PostgreSQL's numeric.
	Payload json.RawMessage
	// RunAt delays the event; the zero time means now. A delayed event still holds back the
	// later events of its key.
	RunAt time.Time
	// MaxAttempts overrides Config.MaxAttempts for this event when positive.
	MaxAttempts int
}

// EnqueueResult reports what happened to one event.
type EnqueueResult struct {
	// ID is the event's job, new or existing; 0 when Archived.
	ID int64
	// Duplicate is true when (Key, Seq) was already enqueued, or came earlier in the batch,
	// with the same content (payload by JSON equality, kind, run_at, max_attempts after
	// defaults): nothing was written.
	Duplicate bool
	// Archived is true, with Duplicate, when (Key, Seq) is at or below the key's archived
	// history (see Client.Archive) and its job is no longer stored: the event is taken as one
	// that ran and was archived, so nothing was written and it will not run. Its content could
	// not be compared, and an event never sent before with a seq that low is reported the same
	// way: the archive keeps only the key's highest archived seq.
	Archived bool
}

// Enqueue enqueues one event in its own transaction.
func (c *Client) Enqueue(ctx context.Context, ev Event) (EnqueueResult, error) {
	return first(c.EnqueueMany(ctx, []Event{ev}))
}

// EnqueueMany enqueues a batch in one transaction: all of it or, on any error, none of it.
// A batch that meets a session on a server that takes no writes (SQLSTATE 25006: a standby,
// or a primary demoted in place) is sent once more, on a new session (see Client).
func (c *Client) EnqueueMany(ctx context.Context, events []Event) ([]EnqueueResult, error) {
	results, err := c.enqueue(ctx, nil, events)
	if isReadOnly(err) && ctx.Err() == nil {
		results, err = c.enqueue(ctx, nil, events)
	}
	return results, err
}

// EnqueueTx enqueues one event inside tx, so it commits or rolls back with the caller's own
// changes. Until tx ends, other enqueues and completions of the same key wait for it: keep
// such transactions short.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, ev Event) (EnqueueResult, error) {
	return first(c.EnqueueManyTx(ctx, tx, []Event{ev}))
}

// EnqueueManyTx enqueues a batch inside tx (see EnqueueTx). On error the batch wrote nothing,
// and tx is aborted, whether the database or the client refused the batch: roll it back. An
// error with SQLSTATE 25006 means tx's server takes no writes (see Client): try the
// transaction again on a new session.
func (c *Client) EnqueueManyTx(ctx context.Context, tx pgx.Tx, events []Event) ([]EnqueueResult, error) {
	return c.enqueue(ctx, tx, events)
}

// enqueue enqueues a batch in tx, or (tx nil) on the client's pool: in one statement, or in
// a transaction of its own when the batch's keys are of several sequence modes or a part of
// it may be written with COPY.
func (c *Client) enqueue(ctx context.Context, tx pgx.Tx, events []Event) (_ []EnqueueResult, err error) {
	callers := tx != nil // tx is the caller's, not one of the client's own
	b, err := c.encodeBatch(events)
	if err == nil {
		err = c.admit(ctx, b)
	}
	if err == nil && tx != nil {
		err = ctx.Err() // a done ctx sends nothing, and so would leave tx as it is
	}
	if err != nil {
		if tx != nil {
			refuse(ctx, func(ctx context.Context) { store.TxRefuse(ctx, c.in(tx), err.Error()) })
		}
		return nil, err
	}
	db := c.db
	if tx != nil {
		db = c.in(tx)
	} else if c.pool == nil {
		return nil, ErrNoPool
	} else if len(b.parts) > 1 || slices.ContainsFunc(b.parts, func(p batchPart) bool { return p.copies(c.copyMinEvents) }) {
		own, err := c.pool.Begin(ctx)
		if err != nil {
			resetIfReadOnly(c.pool, err)
			return nil, err
		}
		defer func() {
			if err == nil {
				err = own.Commit(ctx)
				resetIfReadOnly(c.pool, err)
				err = mapDBError(err)
			}
			if err != nil {
				_ = own.Rollback(context.WithoutCancel(ctx))
			}
		}()
		db, tx = c.in(own), own
	}
	rows := make([][]store.EnqueuedJob, len(b.parts))
	for k := range b.parts {
		copied := false
		if b.parts[k].copies(c.copyMinEvents) {
			if rows[k], copied, err = enqueueByCopy(ctx, tx, db, &b.parts[k].columns); copied {
				c.copied.Add(1)
			}
		}
		switch cols := &b.parts[k].columns; {
		case err != nil || copied:
		case len(cols.Keys) == 1 && cols.FirstSeq == nil:
			var job store.EnqueuedJob
			job, err = store.JobEnqueueOne(ctx, db, cols)
			rows[k] = []store.EnqueuedJob{job}
		default:
			rows[k], err = store.JobEnqueueMany(ctx, db, cols)
		}
		if err != nil {
			resetIfReadOnly(c.pool, err)
			if callers {
				// A statement the database refused aborted tx; one never sent (ctx ended
				// between two) did not: abort it, so the caller's writes cannot commit without
				// the batch.
				refuse(ctx, func(ctx context.Context) { store.TxRefuse(ctx, db, err.Error()) })
			}
			return nil, b.dbError(k, err)
		}
	}
	return b.results(rows), nil
}

// refuse runs abort, which aborts a caller's transaction for a batch refused before it was
// sent, with ctx's values but not its end (the batch may be refused because ctx is done), for
// a bounded time.
func refuse(ctx context.Context, abort func(ctx context.Context)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refuseTimeout)
	defer cancel()
	abort(ctx)
}

// refuseTimeout bounds the statement that aborts a caller's transaction for a refused batch.
const refuseTimeout = 10 * time.Second

// encodedBatch is a validated batch as sent to the database: one part per sequence mode of
// its keys (Config.Sequence), each one statement. An event repeated within the batch with the
// same content is sent once; its repeats report the same job, as duplicates.
type encodedBatch struct {
	parts  []batchPart
	unique []int // unique[u]: the position in the batch of the u-th event sent
	sentAs []int // sentAs[i]: the index in unique of event i
	// where[u]: the part and the position in it of the u-th event sent, until the parts
	// are sorted
	where [][2]int
}

// batchPart is the events of a batch whose keys have one sequence mode.
type batchPart struct {
	sequence policy.Sequence
	columns  store.EnqueueBatch
	sent     []int // sent[p]: the index in unique of the part's p-th event
}

func (b *encodedBatch) results(rows [][]store.EnqueuedJob) []EnqueueResult {
	sent := make([]EnqueueResult, len(b.unique))
	for k, part := range rows {
		for _, r := range part {
			sent[b.parts[k].sent[r.Ord-1]] = EnqueueResult{ID: r.ID, Duplicate: r.Duplicate, Archived: r.Archived()}
		}
	}
	results := make([]EnqueueResult, len(b.sentAs))
	for i, u := range b.sentAs {
		results[i] = sent[u]
		if b.unique[u] != i {
			results[i].Duplicate = true
		}
	}
	return results
}

// dbError maps a database error of part k to the package's, naming the event of a
// conflicting duplicate or an invalid event by its index in the batch rather than in what was
// sent.
func (b *encodedBatch) dbError(k int, err error) error {
	err = mapDBError(err)
	var dup *DuplicateConflictError
	var invalid *InvalidEventError
	switch {
	case errors.As(err, &dup):
		dup.Index = b.batchIndex(k, dup.Index)
	case errors.As(err, &invalid):
		invalid.Index = b.batchIndex(k, invalid.Index)
	}
	return err
}

// batchIndex maps an index into what part k sent to the batch's; one out of range stays.
func (b *encodedBatch) batchIndex(k, sent int) int {
	if sent >= 0 && sent < len(b.parts[k].sent) {
		return b.unique[b.parts[k].sent[sent]]
	}
	return sent
}

// encodeBatch validates events and lays them out for the database. The whole batch is checked
// before anything is sent, so a bad event writes nothing. A repeat of an earlier event of the
// batch is compared with it: the same content is sent once, a different one is an error. The
// parts are in a fixed order (the default mode first, then by first seq and gap policy), so
// that transactions of batches of several modes lock their keys in one order.
func (c *Client) encodeBatch(events []Event) (*encodedBatch, error) {
	if len(events) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrInvalidEvent)
	}
	type identity struct {
		key string
		seq int64
	}
	b := &encodedBatch{sentAs: make([]int, len(events))}
	seen := make(map[identity]int, len(events))
	partOf := map[policy.Sequence]int{}
	for i, ev := range events {
		if err := c.validateEvent(i, ev); err != nil {
			return nil, err
		}
		sequence, err := c.sequenceOf(i, ev.Key)
		if err != nil {
			return nil, err
		}
		payload := string(ev.Payload)
		if payload == "" {
			payload = "null"
		}
		var runAt *time.Time
		if !ev.RunAt.IsZero() {
			t := ev.RunAt.Truncate(time.Microsecond) // PostgreSQL's resolution, on either form
			runAt = &t
		}
		maxAttempts := int32(cmpOr(ev.MaxAttempts, c.cfg.MaxAttempts))
		id := identity{ev.Key, ev.Seq}
		if u, ok := seen[id]; ok {
			if field := b.differsFromSent(u, payload, ev.Kind, runAt, maxAttempts); field != "" {
				return nil, &DuplicateConflictError{Index: i, Key: ev.Key, Seq: ev.Seq, Field: field}
			}
			b.sentAs[i] = u
			continue
		}
		k, ok := partOf[sequence]
		if !ok {
			k = len(b.parts)
			partOf[sequence] = k
			b.parts = append(b.parts, c.newPart(sequence))
		}
		part := &b.parts[k]
		seen[id] = len(b.unique)
		b.sentAs[i] = len(b.unique)
		b.where = append(b.where, [2]int{k, len(part.sent)})
		part.sent = append(part.sent, len(b.unique))
		b.unique = append(b.unique, i)
		cols := &part.columns
		cols.Keys = append(cols.Keys, ev.Key)
		cols.Seqs = append(cols.Seqs, ev.Seq)
		cols.Kinds = append(cols.Kinds, ev.Kind)
		cols.Payloads = append(cols.Payloads, payload)
		cols.RunAts = append(cols.RunAts, runAt)
		cols.MaxAttempts = append(cols.MaxAttempts, maxAttempts)
	}
	slices.SortStableFunc(b.parts, func(x, y batchPart) int { return compareSequences(x.sequence, y.sequence) })
	return b, nil
}

// newPart is an empty part for the keys of one sequence mode.
func (c *Client) newPart(sequence policy.Sequence) batchPart {
	p := batchPart{sequence: sequence}
	p.columns.MaxKeyBytesLimit, p.columns.MaxAttemptsDefault = int32(c.cfg.MaxKeyBytes), int32(c.cfg.MaxAttempts)
	if sequence.Contiguous {
		first := sequence.First
		p.columns.FirstSeq, p.columns.GapAction = &first, sequence.Gap.Action.String()
		if sequence.Gap.Action != policy.GapWait {
			timeout := sequence.Gap.Timeout
			p.columns.GapTimeout = &timeout
		}
	}
	return p
}

// compareSequences orders sequence modes: the default first, then by first seq, gap action
// and timeout.
func compareSequences(x, y policy.Sequence) int {
	if x.Contiguous != y.Contiguous {
		if !x.Contiguous {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(x.First, y.First), cmp.Compare(x.Gap.Action, y.Gap.Action), cmp.Compare(x.Gap.Timeout, y.Gap.Timeout))
}

// sequenceOf is the Sequence that Config.Sequence gives key (the default mode without one).
func (c *Client) sequenceOf(i int, key string) (policy.Sequence, error) {
	if c.cfg.Sequence == nil {
		return policy.Sequence{}, nil
	}
	s := c.cfg.Sequence.Sequence(key)
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("%w: event %d (key %q): Config.Sequence: %v", ErrInvalidEvent, i, key, err)
	}
	return s, nil
}

// differsFromSent names the first field in which an event differs from the u-th event sent
// ("payload", "kind", "run_at", "max_attempts"), as the database compares them, or returns "".
func (b *encodedBatch) differsFromSent(u int, payload, kind string, runAt *time.Time, maxAttempts int32) string {
	w := b.where[u]
	return differsFromColumns(&b.parts[w[0]].columns, w[1], payload, kind, runAt, maxAttempts)
}

// differsFromColumns names the first field in which an event differs from the u-th event of
// cols ("payload", "kind", "run_at", "max_attempts"), as the database compares them, or "".
func differsFromColumns(cols *store.EnqueueBatch, u int, payload, kind string, runAt *time.Time, maxAttempts int32) string {
	sentRunAt := cols.RunAts[u]
	switch {
	case !jsonEqual(cols.Payloads[u], payload):
		return "payload"
	case cols.Kinds[u] != kind:
		return "kind"
	case (sentRunAt == nil) != (runAt == nil) || (runAt != nil && !runAt.Equal(*sentRunAt)):
		return "run_at"
	case cols.MaxAttempts[u] != maxAttempts:
		return "max_attempts"
	}
	return ""
}

// jsonEqual reports whether two valid JSON documents are equal as jsonb compares them: object
// keys in any order, insignificant whitespace, string escapes and numbers by value.
func jsonEqual(a, b string) bool {
	if a == b {
		return true
	}
	va, errA := decodeJSON(a)
	vb, errB := decodeJSON(b)
	return errA == nil && errB == nil && jsonValuesEqual(va, vb)
}

func decodeJSON(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func jsonValuesEqual(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !jsonValuesEqual(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !jsonValuesEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		return ok && canonicalNumber(string(a)) == canonicalNumber(string(b))
	default: // string, bool or nil
		return a == b
	}
}

// canonicalNumber writes a JSON number as sign, significant digits and exponent, so that
// numerically equal numbers (1, 1.0, 10e-1) read the same. It parses nothing into a float
// or a big number: an exponent of any size costs nothing.
func canonicalNumber(n string) string {
	sign := ""
	if rest, ok := strings.CutPrefix(n, "-"); ok {
		sign, n = "-", rest
	}
	mantissa, expText, hasExp := strings.Cut(strings.ToLower(n), "e")
	exp := int64(0)
	if hasExp {
		e, err := strconv.ParseInt(expText, 10, 64)
		if err != nil || e > math.MaxInt32 || e < math.MinInt32 {
			return sign + n // beyond what jsonb stores: compared as written
		}
		exp = e
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return "0" // -0 equals 0
	}
	significant := strings.TrimRight(digits, "0")
	exp += int64(len(digits)-len(significant)) - int64(len(frac))
	return sign + significant + "e" + strconv.FormatInt(exp, 10)
}

func (c *Client) validateEvent(i int, ev Event) error {
	bad := func(field, reason string, args ...any) error {
		return &InvalidEventError{Index: i, Key: ev.Key, Seq: ev.Seq, Field: field, Reason: fmt.Sprintf(reason, args...)}
	}
	switch {
	case ev.Key == "":
		return bad("key", "empty")
	case len(ev.Key) > c.cfg.MaxKeyBytes:
		return bad("key", "%d bytes, over the limit of %d", len(ev.Key), c.cfg.MaxKeyBytes)
	case !utf8.ValidString(ev.Key):
		return bad("key", "not valid UTF-8")
	case strings.ContainsRune(ev.Key, 0):
		return bad("key", "contains a NUL character, which PostgreSQL cannot store")
	case hasControl(ev.Key):
		return bad("key", "contains the control character %U", firstControl(ev.Key))
	case ev.Seq < 0:
		return bad("seq", "negative")
	case ev.Seq > MaxSeq:
		return bad("seq", "out of range (0 to %d)", int64(MaxSeq))
	case !utf8.ValidString(ev.Kind):
		return bad("kind", "not valid UTF-8")
	case strings.ContainsRune(ev.Kind, 0):
		return bad("kind", "contains a NUL character, which PostgreSQL cannot store")
	case hasControl(ev.Kind):
		return bad("kind", "contains the control character %U", firstControl(ev.Kind))
	case len(ev.Kind) > c.cfg.MaxKeyBytes:
		return bad("kind", "%d bytes, over the limit of %d", len(ev.Kind), c.cfg.MaxKeyBytes)
	case !ev.RunAt.IsZero() && (ev.RunAt.UTC().Year() < 1 || ev.RunAt.UTC().Year() > 9999):
		return bad("run_at", "year %d, outside 1 to 9999", postgresYear(ev.RunAt.UTC().Year()))
	case ev.MaxAttempts < 0:
		return bad("max_attempts", "negative")
	case ev.MaxAttempts > math.MaxInt32:
		return bad("max_attempts", "%d, over the limit of %d", ev.MaxAttempts, math.MaxInt32)
	case len(ev.Payload) > c.cfg.MaxPayloadBytes:
		return bad("payload", "%d bytes, over the limit of %d", len(ev.Payload), c.cfg.MaxPayloadBytes)
	case len(ev.Payload) > 0 && !json.Valid(ev.Payload):
		return bad("payload", "not valid JSON")
	case !utf8.Valid(ev.Payload):
		return bad("payload", "not valid UTF-8")
	}
	if reason := badEscape(ev.Payload); reason != "" {
		return bad("payload", "%s", reason)
	}
	if len(ev.Payload) > 0 {
		switch written, reason := jsonbProblem(ev.Payload); {
		case reason != "":
			return bad("payload", "%s", reason)
		case written > int64(c.cfg.MaxPayloadBytes):
			return bad("payload", "%d bytes as PostgreSQL writes it, over the limit of %d", written, c.cfg.MaxPayloadBytes)
		}
	}
	return nil
}

// postgresYear is how PostgreSQL numbers year y of Go's calendar, which has a year 0: years
// before 1 are BC, 0 being 1 BC (-1), so that the client names a year as the database does.
func postgresYear(y int) int {
	if y < 1 {
		return y - 1
	}
	return y
}

// hasControl reports whether s holds a control character (Unicode's Cc: U+0000 to U+001F and
// U+007F to U+009F). Keys and kinds are printed by operators' tools, so they hold none: a key
// cannot move a terminal's cursor or forge a line of output.
func hasControl(s string) bool { return strings.IndexFunc(s, unicode.IsControl) >= 0 }

// firstControl is the first control character of s, which has one.
func firstControl(s string) rune {
	r, _ := utf8.DecodeRuneInString(s[strings.IndexFunc(s, unicode.IsControl):])
	return r
}

// badEscape names the first escape of valid JSON that PostgreSQL's jsonb refuses: \u0000, and
// a UTF-16 surrogate escape that is not a high one followed by a low one (which Go's json.Valid
// accepts). It returns "" when there is none.
func badEscape(payload []byte) string {
	lone := func(r int) string { return fmt.Sprintf(`contains \u%04x, a UTF-16 surrogate without its pair`, r) }
	for i := bytes.IndexByte(payload, '\\'); i >= 0 && i+1 < len(payload); {
		next := i + 2
		if payload[i+1] == 'u' { // valid JSON: four hex digits follow
			r := hex4(payload[i+2:])
			next = i + 6
			switch {
			case r == 0:
				return `contains \u0000, which PostgreSQL's jsonb cannot store`
			case r >= 0xDC00 && r <= 0xDFFF:
				return lone(r)
			case r >= 0xD800 && r <= 0xDBFF:
				if next+6 > len(payload) || payload[next] != '\\' || payload[next+1] != 'u' {
					return lone(r)
				}
				if low := hex4(payload[next+2:]); low < 0xDC00 || low > 0xDFFF {
					return lone(r)
				}
				next += 6
			}
		}
		j := -1
		if next < len(payload) {
			j = bytes.IndexByte(payload[next:], '\\')
		}
		if j < 0 {
			break
		}
		i = next + j
	}
	return ""
}

// hex4 decodes the four hex digits that start b, or returns -1.
func hex4(b []byte) int {
	if len(b) < 4 {
		return -1
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}

func first(results []EnqueueResult, err error) (EnqueueResult, error) {
	if err != nil {
		return EnqueueResult{}, err
	}
	return results[0], nil
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// Validate checks events as an enqueue would, without writing anything. The error is an
// *InvalidEventError naming the first bad event, or a *DuplicateConflictError for an event
// that repeats an earlier one of the batch with different content. Events already stored are
// not looked at.
func (c *Client) Validate(events []Event) error {
	_, err := c.encodeBatch(events)
	return err
}
