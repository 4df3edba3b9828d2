package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
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

// A command's exit status says what a shell means by it: a signal above 128, and the shell's
// own 126 and 127.
func TestExitErrorNamesWhatTheStatusMeans(t *testing.T) {
	for code, want := range map[int]string{
		1:   "command exited with status 1",
		126: "command exited with status 126 (the shell found it but could not run it: not executable?)",
		127: "command exited with status 127 (the shell did not find it: see the worker's stderr)",
		137: "command exited with status 137 (128+9: ended by SIGKILL)",
		200: "command exited with status 200",
	} {
		require.EqualError(t, exitError(code), want, code)
	}
}

// An error that prepared statements meet behind a transaction-mode pooler names the flag that
// avoids them; another error gets no hint.
func TestPoolerHintNamesTheFlag(t *testing.T) {
	t.Parallel()
	for code, hinted := range map[string]bool{"42P05": true, "26000": true, "57P01": false} {
		err := fmt.Errorf("check schema: %w", &pgconn.PgError{Code: code})
		if hinted {
			require.Contains(t, poolerHint(err), "--pooler transaction", code)
		} else {
			require.Empty(t, poolerHint(err), code)
		}
	}
	require.Empty(t, poolerHint(errors.New("connection refused")))
}
