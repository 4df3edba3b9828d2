package store

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Comments go, with what is inside quotes kept as it is, and every line's end.
func TestWithoutCommentsKeepsQuotedText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "SELECT $1::text, '--a''s--', \"x--y\" \nFROM t \n",
		withoutComments("SELECT $1::text, '--a''s--', \"x--y\" -- the job's id\nFROM t -- it's\n-- last"))
}

// Every statement sent has no comment left, and none of the text withoutComments cannot
// read (dollar quotes, /* */ comments).
func TestQueriesAreSentWithoutComments(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(queries, "queries/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, name := range names {
		raw, err := queries.ReadFile(name)
		require.NoError(t, err)
		require.NotContains(t, string(raw), "$$", name)
		require.NotContains(t, string(raw), "/*", name)
		sent := query(strings.TrimPrefix(name, "queries/"))
		require.NotContains(t, sent, "--", name)
	}
}
