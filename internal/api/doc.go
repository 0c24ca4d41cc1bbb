// Package api is the homefs daemon's wire protocol and its client: what
// homefs (the CLI) and homefsd (the daemon, package daemon) share.
//
// The protocol is HTTP+JSON over the daemon's Unix socket (DefaultSocket:
// <root>/homefs.sock), one endpoint per operation under /v1/ (the Path
// constants). A request and its answer are the types of api.go. An error
// travels as an Error: a Code, which also chooses the exit status of the
// command that met it (ExitStatus), and a message for the user. Long work (gc, fsck,
// push, pull, remote fsck) streams newline-delimited JSON: Progress lines,
// then a result or an error line; an error after a tar stream began comes
// in the ErrorTrailer trailer.
//
// Client is the caller's side. Classify gives an error met outside the
// daemon the code the daemon would give it.
//
// The package links no server: not go-fuse, not Prometheus, not fusefs,
// and not net/http (the client speaks HTTP/1.1 itself: wire.go), so that
// the CLI, which reaches the daemon through it alone, pays for
// none of their package initialisation at start. Its types name only the
// value types of the packages below the daemon (cas.Ref, manifest.Layout,
// catalog.Policy, fsck.Report, remotetypes.Config…).
package api
