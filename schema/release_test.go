package schema_test

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/schema"
)

var update = flag.Bool("update", false, "record the function files' checksum under the latest migration")

// functionsSum records the function files' combined checksum under the latest migration.
const functionsSum = "testdata/functions.sum"

// A binary tells a schema that a newer one migrated by its migrations (ErrSchemaNewer). Were
// the function files changed without a migration, a binary before the change, with the same
// migrations, would take the new functions for changed ones and put its own back under the
// newer binary's workers. So a change of the function files comes with a new migration (a
// comment is enough), and their checksum is recorded under it: -update records it only for a
// migration that has none yet.
func TestFunctionChangesComeWithAMigration(t *testing.T) {
	ms, err := schema.Migrations()
	require.NoError(t, err)
	fns, err := schema.Functions()
	require.NoError(t, err)
	h := sha256.New()
	for _, f := range fns {
		fmt.Fprintf(h, "%s %s\n", f.Name, f.Checksum)
	}
	latest := ms[len(ms)-1].Version
	got := fmt.Sprintf("%03d %x\n", latest, h.Sum(nil))

	want, err := os.ReadFile(functionsSum)
	require.NoError(t, err)
	var recorded int
	_, err = fmt.Sscanf(string(want), "%d ", &recorded)
	require.NoError(t, err, "%s: %q", functionsSum, want)
	if string(want) == got {
		return
	}
	require.NotEqual(t, recorded, latest, "the function files changed since migration %03d: add migration %03d "+
		"(a comment is enough) so that older binaries see the schema as newer, then run "+
		"go test ./schema -run TestFunctionChangesComeWithAMigration -update", latest, latest+1)
	if *update {
		require.NoError(t, os.WriteFile(functionsSum, []byte(got), 0o644))
		return
	}
	require.Equal(t, string(want), got, "migration %03d is new: run go test ./schema -run TestFunctionChangesComeWithAMigration -update", latest)
}
