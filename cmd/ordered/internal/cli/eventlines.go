package cli

// The input of ordered enqueue: JSON Lines, one event a line, read a chunk at a time and
// checked field by field, each problem named by its line.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/orderedq/ordered/ordered"
)

// MaxLineBytes bounds one JSON Lines line, its line end aside: the CLI's payload limit (the
// library's default) plus room for the rest of the event.
const MaxLineBytes = ordered.MaxPayloadBytesDefault + 64<<10

// utf8BOM is skipped at the start of an input.
var utf8BOM = []byte("\xef\xbb\xbf")

// eventFields are the fields of an event line, named exactly so.
var eventFields = [...]string{"key", "seq", "kind", "payload", "run_at", "max_attempts"}

// eventReader reads JSON Lines events a chunk at a time.
type eventReader struct {
	sc   *bufio.Scanner
	line int // the number of the last line read
}

func newEventReader(in io.Reader) *eventReader {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes+len("\r\n")) // a line at the limit, and its end
	return &eventReader{sc: sc}
}

// next reads the next chunk of events, none at the end of the input; lines[i] is the line of
// events[i]. Blank lines are skipped.
func (r *eventReader) next() (events []ordered.Event, lines []int, err error) {
	for size := 0; len(events) < EnqueueChunk && size < EnqueueChunkBytes && r.sc.Scan(); {
		r.line++
		line := r.sc.Bytes() // without its line end
		if len(line) > MaxLineBytes {
			return nil, nil, lineTooLong(r.line)
		}
		raw := line
		if r.line == 1 {
			raw = bytes.TrimPrefix(raw, utf8BOM)
		}
		raw = bytes.TrimLeft(raw, " \t\r") // JSON's whitespace; the scanner took the newline
		lead := len(line) - len(raw)
		raw = bytes.TrimRight(raw, " \t\r")
		if len(raw) == 0 {
			continue
		}
		ev, err := parseEvent(raw, lead)
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: %w; nothing was enqueued", r.line, err)
		}
		events = append(events, ev)
		lines = append(lines, r.line)
		size += len(raw)
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, lineTooLong(r.line + 1)
		}
		return nil, nil, err
	}
	return events, lines, nil
}

// lineTooLong is the error of a line longer than MaxLineBytes.
func lineTooLong(line int) error {
	return fmt.Errorf("line %d: longer than %d bytes; nothing was enqueued", line, MaxLineBytes)
}

// eventChunk is one chunk of events as eventReader.next returns it.
type eventChunk struct {
	events []ordered.Event
	lines  []int
	err    error
}

// send sends the chunks of the input on out, up to the first that is empty (the end) or
// fails, or until ctx is done.
func (r *eventReader) send(ctx context.Context, out chan<- eventChunk) {
	for {
		events, lines, err := r.next()
		select {
		case out <- eventChunk{events, lines, err}:
		case <-ctx.Done():
			return
		}
		if err != nil || len(events) == 0 {
			return
		}
	}
}

// readEvents reads a whole input into memory, for the demo's small files.
func readEvents(in io.Reader) ([]ordered.Event, []int, error) {
	r := newEventReader(in)
	var events []ordered.Event
	var lines []int
	for {
		chunk, chunkLines, err := r.next()
		if err != nil || len(chunk) == 0 {
			return events, lines, err
		}
		events, lines = append(events, chunk...), append(lines, chunkLines...)
	}
}

// parseEvent decodes one line strictly: one JSON object whose field names are eventFields
// exactly (encoding/json alone would match "KEY" to key and let a repeated field overwrite
// the first), nothing after it. raw starts at byte lead of its line: a syntax error names the
// column of the line where it is, and the field whose value it is in.
func parseEvent(raw []byte, lead int) (ordered.Event, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	invalid := func(err error) error { return fmt.Errorf("not a valid event object%s", syntaxProblem(raw, lead, err)) }
	if tok, err := dec.Token(); err != nil {
		return ordered.Event{}, invalid(err)
	} else if tok != json.Delim('{') {
		return ordered.Event{}, invalid(errors.New("not an object"))
	}
	var values [len(eventFields)]json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ordered.Event{}, invalid(err)
		}
		name, _ := tok.(string) // inside an object, Token returns names as strings
		i := slices.Index(eventFields[:], name)
		switch {
		case i < 0:
			return ordered.Event{}, fmt.Errorf("unknown field %q", truncateBytes([]byte(name), 64))
		case values[i] != nil:
			return ordered.Event{}, fmt.Errorf("field %q given twice", name)
		}
		if err := dec.Decode(&values[i]); err != nil {
			return ordered.Event{}, fmt.Errorf("%s: not valid JSON%s", name, syntaxProblem(raw, lead, err))
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return ordered.Event{}, invalid(err)
	}
	if _, err := dec.Token(); err == nil {
		return ordered.Event{}, errors.New("more than one JSON value on the line")
	} else if err != io.EOF {
		return ordered.Event{}, fmt.Errorf("data after the event object: %v", err)
	}
	return eventOf(values)
}

// syntaxProblem says where in its line, raw starting at byte lead of it, the syntax error err
// of encoding/json is, and what it is: " at column N (the place in the field's value as a JSON
// Pointer, when it is within one): problem". encoding/json's offsets count from where a value's
// decoding began, so the place is found again with jsontext, read as leniently (invalid UTF-8
// and repeated names are refused apart).
func syntaxProblem(raw []byte, lead int, err error) string {
	var syn *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ": the line ends before its JSON does"
	case !errors.As(err, &syn):
		return ": " + err.Error()
	}
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))
	for {
		_, readErr := dec.ReadToken()
		var located *jsontext.SyntacticError
		switch {
		case errors.As(readErr, &located):
			where := fmt.Sprintf(" at column %d", int64(lead)+located.ByteOffset+1)
			if p := located.JSONPointer; strings.Count(string(p), "/") > 1 {
				where += " (" + truncateBytes([]byte(p), 64) + ")"
			}
			return where + ": " + located.Err.Error()
		case readErr != nil:
			return ": " + err.Error()
		}
	}
}

// eventOf makes an event of its fields' JSON values, by eventFields; a null is an absent field.
func eventOf(values [len(eventFields)]json.RawMessage) (ordered.Event, error) {
	present := func(v json.RawMessage) bool { return v != nil && string(v) != "null" }
	key, seq, kind, payload, runAt, maxAttempts := values[0], values[1], values[2], values[3], values[4], values[5]
	var ev ordered.Event
	var err error
	if !present(key) {
		return ev, errors.New("missing key")
	}
	if ev.Key, err = jsonString(key); err != nil {
		return ev, fmt.Errorf("key: %w", err)
	}
	if !present(seq) {
		return ev, errors.New("missing seq")
	}
	if ev.Seq, err = strconv.ParseInt(string(seq), 10, 64); errors.Is(err, strconv.ErrRange) {
		return ev, fmt.Errorf("seq %s is out of range (0 to %d)", truncateBytes(seq, 32), int64(ordered.MaxSeq))
	} else if err != nil {
		return ev, fmt.Errorf("seq %s is not an integer", truncateBytes(seq, 32))
	}
	if present(kind) {
		if ev.Kind, err = jsonString(kind); err != nil {
			return ev, fmt.Errorf("kind: %w", err)
		}
	}
	ev.Payload = payload // checked by the library, which names the payload
	if present(runAt) {
		if err := json.Unmarshal(runAt, &ev.RunAt); err != nil {
			return ev, fmt.Errorf("run_at %s is not an RFC 3339 time", truncateBytes(runAt, 40))
		}
		if _, offset := ev.RunAt.Zone(); offset <= -16*3600 || offset >= 16*3600 {
			return ev, fmt.Errorf("run_at %s: its UTC offset is beyond ±15:59, which PostgreSQL refuses", truncateBytes(runAt, 40))
		}
		if ev.RunAt.IsZero() {
			return ev, fmt.Errorf("run_at %s: the earliest time there is, which the client takes for no run_at; "+
				"give a later time or none", truncateBytes(runAt, 40))
		}
	}
	if present(maxAttempts) {
		n, err := strconv.ParseInt(string(maxAttempts), 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange) || n > math.MaxInt32:
			return ev, fmt.Errorf("max_attempts %s is out of range (at most %d)", truncateBytes(maxAttempts, 32), math.MaxInt32)
		case err != nil:
			return ev, fmt.Errorf("max_attempts %s is not an integer", truncateBytes(maxAttempts, 32))
		}
		ev.MaxAttempts = int(n)
	}
	return ev, nil
}

// jsonString decodes a JSON string, refusing the text that encoding/json would replace with
// U+FFFD (invalid UTF-8, a UTF-16 surrogate escape without its pair): two different keys must
// not become one.
func jsonString(raw json.RawMessage) (string, error) {
	if raw[0] != '"' {
		return "", errors.New("not a string")
	}
	if !utf8.Valid(raw) {
		return "", errors.New("not valid UTF-8")
	}
	if r := loneSurrogate(raw); r >= 0 {
		return "", fmt.Errorf(`contains \u%04x, a UTF-16 surrogate without its pair`, r)
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// loneSurrogate is the first UTF-16 surrogate escape of the JSON string s that is not a high
// one followed by a low one, or -1.
func loneSurrogate(s []byte) int {
	hex := func(i int) int { // the escape \uXXXX at s[i:], or -1
		if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
			return -1
		}
		n, err := strconv.ParseUint(string(s[i+2:i+6]), 16, 16)
		if err != nil {
			return -1
		}
		return int(n)
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		r := hex(i)
		switch {
		case r < 0: // another escape: skip its character
			i++
		case r >= 0xD800 && r <= 0xDBFF:
			if low := hex(i + 6); low < 0xDC00 || low > 0xDFFF {
				return r
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return r
		default:
			i += 5
		}
	}
	return -1
}

// truncateBytes is b cut to at most n bytes, on a character boundary, for an error message.
func truncateBytes(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "..."
}
