package harness

import _ "embed"

// The harness's statements, one file each in queries/.
var (
	// progressSQL counts settled jobs (done or failed) and those still to run: queued or
	// running jobs, except those waiting behind a blocked key.
	//go:embed queries/progress.sql
	progressSQL string

	// setSearchPathSQL sets a session's search_path.
	//go:embed queries/set_search_path.sql
	setSearchPathSQL string
)
