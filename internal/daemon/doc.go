// Package daemon is homefs's server: what homefsd (homefs serve) runs. Its protocol and
// the client that speaks it are package api.
//
// The server (Serve) owns one root directory: the Badger store in
// <root>/store (one process per root: a second server fails with
// badgerstore.ErrLocked), the record of its mounts in <root>/mounts.json, and by
// default its Unix socket <root>/homefs.sock (mode 0600; the peer's uid is
// also checked with SO_PEERCRED). The protocol is HTTP+JSON over that
// socket, one endpoint per operation under /v1/ (api.PathStatus…). Errors
// travel as api.Error, the code chosen by errors.Is on the sentinels of
// the packages below (never by text): fusefs's here, the others in
// api.Classify. Long work (gc, fsck, push, pull) streams
// newline-delimited JSON: progress lines, then a result or an error line.
//
// Service holds the operations themselves, free of HTTP; the logic lives
// in the packages it belongs to (fusefs, catalog, archive, fsck, fork,
// remote). Its store stack is built once: the Badger store, a
// remote.ReadThrough over it (the remotes of <root>/remotes.json, added at
// runtime by "remote add"), and a fusefs.Recorder over that, which the
// catalog and the engine share. Remote credentials are the daemon's own
// (its environment or shared credentials file); they are never stored or
// sent to a client. Work that puts objects before naming them (capture,
// fork, import, bind, pull) runs under the engine's Guard, so a gc waits
// for it.
//
// The leases the daemon acquires (lease.go, holder id in <root>/root-id)
// are renewed by one goroutine each, every ttl/3, until released, lost
// to another host, or Close.
//
// After a crash, Serve finds FUSE mounts named "homefs:…" that the last
// run recorded in mounts.json and detaches them (MNT_DETACH).
package daemon
