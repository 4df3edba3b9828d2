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

// An error is printed on one line, and a key it quotes keeps its spaces.
func TestOneLineKeepsSpacesWithinALine(t *testing.T) {
	t.Parallel()
	require.Equal(t, `line 2: key "a  b": late DETAIL: x y`, oneLine("  line 2: key \"a  b\": late\n\tDETAIL:\tx \r\n y \n"))
	require.Equal(t, "", oneLine(" \n\t "))
}
