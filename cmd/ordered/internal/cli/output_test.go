package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Printable text is printed as it is, a cell that starts with a quote is quoted, and the error
// line escapes what is not printable.
func TestCellAndEscapeUnprintable(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ключ 🔑 a\\b", cell("ключ 🔑 a\\b"))
	require.Equal(t, `"\"quoted\""`, cell(`"quoted"`))
	require.Equal(t, `"a\xffb"`, cell("a\xffb"))
	require.Equal(t, `a\xffb \ufeff �`, escapeUnprintable("a\xffb \ufeff \uFFFD"))
	require.False(t, strings.ContainsRune(escapeUnprintable("\u2028"), '\u2028'))
}
