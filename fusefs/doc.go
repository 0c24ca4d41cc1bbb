// Package fusefs serves homefs sessions through the kernel's FUSE: each
// mount is a copy-on-write view of a session's tree, whose content lives
// in a cas store and whose history in the catalog.
//
// # Terms
//
//   - Engine: the mounts and live sessions of one store; capture, fork,
//     restore, graft and gc go through it.
//   - Session: a live session tree shared by every mount of the session
//     (node: one inode of it; fnode: a mount's go-fuse wrapper of a node).
//   - Flush: storing every change since the last one (dirty chunks, chunk
//     lists, tree nodes up to the root) and recording the new root in the
//     head; durable when it backs an fsync, a capture or an unmount.
//   - Journal: per session, the served writes since the durable head while
//     its namespace is unchanged (write records, in the page cache, synced
//     by an fsync) and the byte ranges of fsyncs that a full flush would
//     cost too much for (journal.go); replayed after a crash.
//   - Backing file: a local file in <root>/backing/ that the kernel passes
//     a descriptor's reads and writes through to (FUSE passthrough), so
//     that they cost what the local disk costs. Its kind (appender, wild,
//     staged, kept) and the transitions between them are the type
//     backing's (passthrough.go).
//   - Ingest: taking what a passed-through writer wrote into its backing
//     file into the node (as if the daemon had been sent the writes).
//   - Staged file: a new file being written write-only, whose content
//     lives in its backing file (the staging file) until it is absorbed:
//     read back into the node, which a flush then stores. Unstage: the
//     daemon takes the content over (it has to serve the file itself).
//   - Wild backing file: one that a descriptor able to write anywhere (or
//     map it) joined, so every ingest compares all of it, not the tail.
//   - Spill: storing a file's write buffers before a flush, to bound memory.
//   - Gate: the wrapper of go-fuse's RawFileSystem that every request of a
//     mount passes (rawGate, nointr.go): it ignores INTERRUPT, serves
//     directories without OPENDIR, folds into a create's mode the umask
//     and into a setxattr's flags the setgid drop that go-fuse's node API
//     would lose (acl.go), and times each request for the engine's
//     Observer (observe.go), the daemon's metrics.
//   - ACL: a POSIX ACL, stored as the system.posix_acl_access or
//     system.posix_acl_default xattr in the kernel's format; the kernel
//     enforces it, the daemon keeps it and the mode in step (acl.go).
//   - Transport: how a mount's requests reach the gate: go-fuse reading
//     /dev/fuse, or FUSE over io_uring (package fusefs/uring, its own
//     locks), as the engine's URingMode and the host's switch allow
//     (uringswitch.go).
//
// # Where a write goes
//
// The route is chosen when a file is opened: Session.openRoute returns it
// as a route, one of the table's rows (routeDaemon, routeAppender,
// routeStaged, routeWild) or routeJoin, any other descriptor joining a
// passthrough one; node.eligible decides a mount's first open of a node.
// Every descriptor of a node in one mount takes the node's route while
// any passthrough descriptor is open (the kernel refuses to mix them); a
// reader of a staged file reads the staging file.
//
//	descriptor                         route          durable after
//	---------------------------------  -------------  --------------------------------------------
//	O_RDWR (Codex's rollout, SQLite),  daemon-served  fsync (journal or flush), an O_SYNC/O_DSYNC
//	  O_WRONLY of a non-empty file,                   write, the periodic flush (5 s), capture,
//	  any O_SYNC/O_DSYNC, setuid/caps                 unmount
//	O_WRONLY|O_APPEND, file ≤ 64 MiB   appender       as above, once ingested: every flush and
//	  (Pi, Claude Code transcripts)    passthrough    fsync ingests the backing file's new tail
//	O_WRONLY of an empty file, or one  staged         fsync (the staging file is fdatasynced and
//	  O_TRUNC empties (`cmd > file`)   passthrough    named in the journal), capture, close (the
//	                                                  absorber), the periodic flush once the
//	                                                  file stayed idle for an interval
//	O_RDWR, or O_WRONLY not O_APPEND,  wild backing   as the appender; ingest compares every chunk
//	  joining an appender's node
//
// Writes the daemon serves land in the node's dirty chunks (whole buffers
// or small overlays over a stored chunk) and reach the store at the next
// flush or spill; while the namespace is unchanged since the durable head,
// each is also a write record in the journal before it is acknowledged, so
// a kill -9 of the daemon loses none of them. Until the flush that makes
// them durable, a kill -9 loses what a passthrough write, or a served
// write after a namespace change, left only in memory or in an unnamed
// backing file; an fsync is kept across kill -9 and power loss.
//
// # Lock order
//
// Acquire left to right; the leaves are never held while taking another
// lock. This is the one authoritative order (docs/ARCHITECTURE.md repeats
// it with the reasons):
//
//	Engine.mu < Session.freeze < fnode.openMu < Session.treeMu < node.mu < Session.dirtyMu
//	leaves: chunkCache.mu, pendingChunks.mu, orphans.mu, backedSet.mu, sparePool.mu,
//	        absorbQueue.mu, workers.mu, journal.mu, Recorder.mu, dirStreams.mu
//
// Session.freeze is held shared by every mutating operation and
// exclusively by a flush, so a snapshot is one instant of the whole
// session. The kernel is told of invalidations only with no lock held: it
// may call back into the mount.
package fusefs
