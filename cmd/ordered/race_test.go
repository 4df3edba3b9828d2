//go:build race

package main

// Under `go test -race` the CLI binary of the process tests is built with the race detector
// too, so the worker's signal and shutdown paths are checked as well.
func init() { cliBuildFlags = append(cliBuildFlags, "-race") }
