// Package harness holds what the demo, the chaos run and the benchmark suite share: the
// database they run against (the given one, else the server on 127.0.0.1:5432, else a private
// cluster), a fresh schema for each run, the scripts that make some events flaky or poison,
// the worker processes they start from this very binary, and the progress of a run.
package harness
