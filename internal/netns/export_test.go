package netns

// OuterOf returns the name of the caller's end of h's link, for tests that read its qdisc
// alone (other hosts, of other tests, may have theirs at the same time).
func OuterOf(h *Host) string { return h.outer }
