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
// numeric. It returns "" when there is neither. The place is a JSON Pointer (RFC 6901).
func jsonbProblem(payload []byte) string {
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
		if d.dec.PeekKind() == '0' {
			n, err := d.dec.ReadValue()
			if err != nil {
				return decodeProblem(err)
			}
			if !numericHolds(n) {
				return fmt.Sprintf("the number %s%s is beyond what PostgreSQL's jsonb stores "+
					"(131072 digits before the decimal point, 16383 after it)",
					truncate(string(n), 32), at(d.dec.StackPointer()))
			}
			continue
		}
		if _, err := d.dec.ReadToken(); err != nil {
			return decodeProblem(err)
		}
	}
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

// numericHolds reports whether PostgreSQL's numeric holds the valid JSON number n, by the
// rules of its input function: the exponent's size, then the scale (digits after the point,
// less the exponent), then for a number other than zero the weight of its first digit.
func numericHolds(n []byte) bool {
	if len(n) <= numericMaxScale && !bytes.ContainsAny(n, "eE") {
		return true // the common case: too short to pass either limit
	}
	s := strings.TrimPrefix(string(n), "-")
	mantissa, expText, hasExp := strings.Cut(strings.ToLower(s), "e")
	exp := int64(0)
	if hasExp {
		e, err := strconv.ParseInt(expText, 10, 64)
		if err != nil || e > numericMaxExp || e < -numericMaxExp {
			return false
		}
		exp = e
	}
	whole, frac, _ := strings.Cut(mantissa, ".")
	if int64(len(frac))-exp > numericMaxScale {
		return false
	}
	digits := whole + frac
	first := strings.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if first < 0 {
		return true // zero
	}
	return int64(len(whole)-1-first)+exp <= numericMaxWeight
}
