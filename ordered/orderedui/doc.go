// Package orderedui is the queue's web dashboard for the people who operate it: an overview
// (counts, the oldest ready job's age, the done rate and the oldest age over the last hour,
// blocked keys, running jobs and expired leases), the blocked keys with their failed heads,
// the failed jobs filtered and paged, a key's timeline and a job's detail, with replay and
// skip through the same fenced calls as the CLI (ordered.Client.Replay and Skip).
//
// # Mounting it
//
// New returns a plain http.Handler. A service mounts it under its own mux and its own auth,
// telling it the prefix it is mounted at:
//
//	ui, err := orderedui.New(client, &orderedui.Config{Prefix: "/ops/queue"})
//	if err != nil { ... }
//	defer ui.Close()
//	mux.Handle("/ops/queue/", http.StripPrefix("/ops/queue", requireOperator(ui)))
//
// Close stops the sampler that keeps the last hour of the oldest ready job's age.
//
// # Serving it alone
//
// Serve is what `ordered ui` runs: it binds 127.0.0.1 unless told otherwise, refuses to bind
// any other address without a token or a user and password (AuthFromEnv reads them from
// ORDERED_UI_TOKEN, or ORDERED_UI_USER and ORDERED_UI_PASSWORD), and serves until its
// context ends.
//
// # Safety
//
// Every value is escaped by html/template: keys, kinds, errors and payloads are whatever a
// producer sent. Every action (a POST) needs the CSRF token of the browser's session, a
// cookie that the page repeats in a form field, and is refused from another origin. With
// Config.ReadOnly the pages show no action and every action is refused. The dashboard reads
// through ordered.Client's inspection calls and changes jobs only through Client.Replay and
// Client.Skip, which lock the key and fence the change like the CLI's replay and skip.
package orderedui
