// Package execguard runs a shell command so that it and every process it starts never
// outlive the one who asked for it.
//
// Run starts this very binary (/proc/self/exe) as a guard process, `Name --grace D --
// COMMAND`, which the binary must dispatch to Supervise. The guard runs COMMAND through
// /bin/sh in a process group of its own, as a child subreaper, so that every process COMMAND
// starts stays its descendant, also one that leaves the group or whose parent exits. The guard
// holds the read end of a control pipe whose write end only the caller of Run holds: when the
// caller closes it (its context is done) or dies, even by SIGKILL, the guard terminates the
// whole tree, SIGTERM, then SIGKILL after the grace. The caller may also write a fence on it
// (Command.Fence): the guard then terminates the tree when the fence passes by its own clock,
// unless a later fence came first, so that a caller that is stopped (SIGSTOP, a debugger)
// cannot keep the command running past it. A freeze of the guard too (a paused cgroup or
// machine) holds the command with it; it is ended as soon as the guard runs again. When
// COMMAND exits, what it left running is ended the same way, and the guard exits only once no
// descendant is left. Should the guard be killed outright, the shell gets SIGKILL (its
// parent-death signal) and the caller, a child subreaper too, ends what the shell started
// (orphans.go): a process that calls Run starts no other child.
package execguard
