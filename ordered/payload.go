package ordered

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// What PostgreSQL's numeric, in which jsonb stores a number, holds: digits before the decimal
// point up to the weight of 10^131071, digits after it up to 16383, and an exponent written
// below 2^30 - 1 in size.
const (
	numericMaxWeight = 131071
	numericMaxScale  = 16383
	numericMaxExp    = math.MaxInt32/2 - 1
)

// payloadDecoders keeps decoders for jsonbProblem, which runs on every event enqueued.
var payloadDecoders = sync.Pool{New: func() any { return new(payloadDecoder) }}

type payloadDecoder struct {
	in  bytes.Reader
	dec *jsontext.Decoder
}

// jsonbProblem names what jsonb would do to a valid JSON payload other than store it as it
// reads: merge an object's members of one name (keeping the last), or refuse a number beyond
// numeric. It returns "" when there is neither. The place is a JSON Pointer (RFC 6901). It also
// returns the payload's size as PostgreSQL writes it (octet_length(payload::text)): what a
// worker reads back, which a number written with an exponent can make far larger than the
// payload sent (1e131071 is 131072 digits).
func jsonbProblem(payload []byte) (written int64, problem string) {
	d := payloadDecoders.Get().(*payloadDecoder)
	defer func() {
		d.in.Reset(nil) // the pool keeps no payload alive
		payloadDecoders.Put(d)
	}()
	d.in.Reset(payload)
	if d.dec == nil {
		d.dec = jsontext.NewDecoder(&d.in)
	} else {
		d.dec.Reset(&d.in)
	}
	for {
		kind := d.dec.PeekKind()
		if kind == '}' || kind == ']' {
			written += separatorBytes(d.dec)
		}
		switch kind {
		case '0':
			n, err := d.dec.ReadValue()
			if err != nil {
				return written, decodeProblem(err)
			}
			size, holds := numericWritten(n)
			if !holds {
				return written, fmt.Sprintf("the number %s%s is beyond what PostgreSQL's jsonb stores "+
					"(131072 digits before the decimal point, 16383 after it)",
					truncate(string(n), 32), at(d.dec.StackPointer()))
			}
			written += size
		case '"':
			str, err := d.dec.ReadValue()
			if err != nil {
				return written, decodeProblem(err)
			}
			written += stringWritten(str)
		default:
			tok, err := d.dec.ReadToken()
			if err != nil {
				return written, decodeProblem(err)
			}
			switch tok.Kind() {
			case 't', 'n':
				written += 4
			case 'f':
				written += 5
			default:
				written++ // { } [ ]
			}
		}
	}
}

// separatorBytes is what jsonb writes between the names and values of the array or object
// that dec is about to end: ", " between values and between members, ": " after each name.
func separatorBytes(dec *jsontext.Decoder) int64 {
	kind, n := dec.StackIndex(dec.StackDepth())
	switch {
	case n == 0:
		return 0
	case kind == '{': // n/2 members
		return 2*n - 2
	}
	return 2 * (n - 1)
}

// stringWritten is the size of a valid JSON string (quoted, escaped as in the payload) as
// jsonb writes it: its value escaped again, \" and \\ and the controls that have a short
// escape in two bytes, other controls as \u00XX, everything else as its UTF-8 bytes.
func stringWritten(quoted []byte) int64 {
	body := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return int64(len(quoted)) // no escapes: written as read
	}
	n := int64(2)
	for i := 0; i < len(body); {
		if body[i] != '\\' {
			n++
			i++
			continue
		}
		if body[i+1] != 'u' {
			n += 2 // \" \\ \b \f \n \r \t are written as read
			if body[i+1] == '/' {
				n-- // \/ is written as /
			}
			i += 2
			continue
		}
		r := hex4(body[i+2:])
		i += 6
		switch {
		case r >= 0xD800 && r <= 0xDBFF: // a high surrogate; its low one follows (badEscape)
			n += 4
			i += 6
		case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
			n += 2
		case r < 0x20:
			n += 6
		default:
			n += int64(utf8.RuneLen(rune(r)))
		}
	}
	return n
}

// decodeProblem names the problem of a decoder's error; the end of the payload is none.
func decodeProblem(err error) string {
	var syntax *jsontext.SyntacticError
	switch {
	case errors.Is(err, io.EOF):
		return ""
	case errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &syntax):
		return fmt.Sprintf("the name %q is given twice in the object%s; jsonb would keep only the last",
			truncate(syntax.JSONPointer.LastToken(), 64), at(syntax.JSONPointer.Parent()))
	}
	return fmt.Sprintf("not valid JSON: %v", err)
}

// at is where a value is, for a message: " at /a/0", or "" for the payload itself.
func at(p jsontext.Pointer) string {
	if p == "" {
		return ""
	}
	return " at " + truncate(string(p), 64)
}

// numericWritten reports whether PostgreSQL's numeric holds the valid JSON number n, by the
// rules of its input function (the exponent's size, then the scale: digits after the point,
// less the exponent, then for a number other than zero the weight of its first digit), and
// the size PostgreSQL writes it in: no exponent, a minus unless it is zero, the integer part
// ("0" below one), then the point and the scale's digits.
func numericWritten(n []byte) (size int64, holds bool) {
	if len(n) <= numericMaxScale && !bytes.ContainsAny(n, "eE") {
		// The common case: too short to pass either limit, and written as read (JSON has no
		// leading zeros), but for the minus of a zero.
		if n[0] == '-' && !bytes.ContainsFunc(n[1:], func(r rune) bool { return r != '0' && r != '.' }) {
			return int64(len(n)) - 1, true
		}
		return int64(len(n)), true
	}
	s := strings.TrimPrefix(string(n), "-")
	negative := len(s) < len(n)
	mantissa, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := int64(0)
	if hasExp {
		e, err := strconv.ParseInt(expText, 10, 64)
		if err != nil || e > numericMaxExp || e < -numericMaxExp {
			return 0, false
		}
		exp = e
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	scale := int64(len(frac)) - exp
	if scale > numericMaxScale {
		return 0, false
	}
	size = 1 // the integer part: "0" unless the first digit is at 10^0 or above
	if first := strings.IndexFunc(whole+frac, func(r rune) bool { return r != '0' }); first >= 0 {
		weight := int64(len(whole)-1-first) + exp
		if weight > numericMaxWeight {
			return 0, false
		}
		size = max(weight+1, 1)
		if negative {
			size++
		}
	}
	if scale > 0 {
		size += 1 + scale
	}
	return size, true
}
