// Package netns makes simulated hosts on this machine for tests and chaos runs: each Host is a
// Linux network namespace joined to the caller's namespace by a veth pair with a /30 of its
// own (10.213.N.0/30: the caller's side .1, the host's side .2), so a process started in it
// (Exec) reaches the caller over a real link. A Host can be partitioned and healed: each end
// then sends to a link-layer address nobody has, so the other end drops every packet without
// the kernel telling either side, and TCP sees silence, as across a real network. Its link
// can be slowed to a rate (tc tbf on both ends: packets queue, late ones are dropped) and
// restored. (netem would add fixed delay and random loss, but kernels built without
// sch_netem, as small VM kernels often are, cannot run it; tbf and neighbour entries need
// nothing beyond the base kernel.)
//
// It needs root and iproute2 (ip, tc). Everything a Net makes is named after its prefix and
// the pid of its process; New removes what earlier processes with the same prefix left behind
// when they are gone, and Close removes what this Net made.
package netns
