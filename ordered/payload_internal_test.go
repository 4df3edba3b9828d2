package ordered

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/testdb"
)

// The payload's size as the client computes it is PostgreSQL's octet_length(payload::text),
// byte for byte: for numbers in every form (exponents, scales, zeros, signs), strings with
// every kind of escape, names, empty and nested containers, whitespace, top-level scalars, and
// a few thousand random documents built of them.
func TestPayloadWrittenSizeIsPostgreSQLs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := testdb.New(t)
	payloads := []string{
		`null`, `true`, `false`, `0`, `-0`, `-0.0`, `0.000`, `-0e5`, `0e-3`, `0.0e-3`, `12`, `-12`,
		`1.50`, `1e2`, `1E+3`, `1e-2`, `1.5e-3`, `-12.5e1`, `123.456e1`, `9.99e-5`, `1e131071`,
		`-1e131071`, `12.5e131070`, `1e-16383`, `0.001e3`, `0.0001`, `10E-1`, `100e-2`, `5e0`,
		`"x"`, `""`, `"é"`, `"\u00e9"`, `"\/"`, `"\n\t\b\f\r"`, `"\u0001\u001f"`, `"\u007f"`,
		`"\ud83d\ude00"`, `"\""`, `"\\"`, `"\u0022\u005c"`, `"\u2028"`, `"\u0008\u000a\u0009"`,
		`{}`, `[]`, `[[]]`, `{"a":[],"b":{}}`, `[[],[{}]]`, `{"\u00e9\n":"\/"}`,
		"{ \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } }", `[1e131071,1e131071]`, `{"a":{"a":1},"b":[{"a":2},{"a":3}]}`,
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		payloads = append(payloads, randomJSON(r, 3))
	}
	want := make([]int64, len(payloads))
	rows, err := q.Pool.Query(ctx, `SELECT octet_length(p::jsonb::text) FROM unnest($1::text[]) WITH ORDINALITY AS u(p, n) ORDER BY n`, payloads)
	require.NoError(t, err)
	for i := 0; rows.Next(); i++ {
		require.NoError(t, rows.Scan(&want[i]))
	}
	require.NoError(t, rows.Err())
	for i, p := range payloads {
		got, problem := jsonbProblem([]byte(p))
		require.Empty(t, problem, "%.80s", p)
		require.Equal(t, want[i], got, "%.80s", p)
	}
}

// randomJSON is a random JSON document of up to depth levels, written with the forms that
// PostgreSQL writes otherwise: numbers with exponents, fractions and zeros, escapes of every
// kind, and whitespace.
func randomJSON(r *rand.Rand, depth int) string {
	space := func() string { return []string{"", "", " ", "\n\t "}[r.IntN(4)] }
	kinds := 4
	if depth > 0 {
		kinds = 6
	}
	switch r.IntN(kinds) {
	case 0:
		return []string{"true", "false", "null"}[r.IntN(3)]
	case 1, 2:
		var b strings.Builder
		if r.IntN(3) == 0 {
			b.WriteByte('-')
		}
		if r.IntN(3) == 0 {
			b.WriteByte('0')
		} else {
			fmt.Fprintf(&b, "%d", r.IntN(100000)+1)
		}
		if r.IntN(2) == 0 {
			fmt.Fprintf(&b, ".%0*d", r.IntN(6)+1, r.IntN(1000))
		}
		if r.IntN(2) == 0 {
			fmt.Fprintf(&b, "%s%+d", []string{"e", "E"}[r.IntN(2)], r.IntN(41)-20)
		}
		return b.String()
	case 3:
		return randomString(r)
	case 4:
		n := r.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = space() + randomJSON(r, depth-1) + space()
		}
		return "[" + strings.Join(parts, ",") + "]"
	default:
		n := r.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			// Names are made distinct: jsonb would merge repeated ones, which the client refuses.
			parts[i] = space() + `"` + fmt.Sprint(i) + randomString(r)[1:] + space() + ":" + space() + randomJSON(r, depth-1)
		}
		return "{" + strings.Join(parts, ",") + space() + "}"
	}
}

// randomString is a random JSON string of plain characters, multibyte ones and escapes.
func randomString(r *rand.Rand) string {
	pieces := []string{"a", "Z", " ", "é", "€", "😀", `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`,
		`\u0041`, `\u00e9`, `\u20ac`, `\ud83d\ude00`, `\u0001`, `\u001f`, `\u007f`, `\u0022`, `\u005c`, `\u0008`}
	var b strings.Builder
	b.WriteByte('"')
	for range r.IntN(8) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	b.WriteByte('"')
	return b.String()
}
