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
//     head; durable (the head's commit is synced) when it backs an fsync,
//     a capture or an unmount, and for the periodic flush, which the
//     engine runs every Options.FlushInterval (5 s) for each session with
//     changes, with an appender's or wild backing file holding bytes the
//     daemon has not taken yet, or with an open staged file gone idle
//     (Engine.flushEvery).
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
//     read back into the node's write buffers, which a flush then stores.
//     Unstage: the daemon takes the content over (it has to serve the file
//     itself).
//   - Wild backing file: one that a descriptor able to write anywhere (or
//     map it) joined, so every ingest compares all of it, not the tail.
//   - Spill: storing a file's write buffers before a flush, to bound memory.
//   - Gate: the wrapper of go-fuse's RawFileSystem that every request of a
//     mount passes (rawGate, nointr.go): it ignores INTERRUPT, serves
//     directories without OPENDIR, and times each request for the
//     engine's Observer (observe.go), the daemon's metrics.
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
// passthrough one; node.eligible decides a mount's first open of a node,
// and Session.closeRoute undoes the choice when the handle is released.
// Every descriptor of a node in one mount takes the node's route while
// any passthrough descriptor is open (the kernel refuses to mix them),
// whatever its flags: an O_SYNC or O_DSYNC descriptor that joins is kept
// as the passthrough rows below say. The descriptor column is otherwise
// that of a mount's first open of the node.
//
//	descriptor                           route           the write lands in
//	-----------------------------------  --------------  ---------------------------------------
//	O_RDWR (Codex's rollout, SQLite),    daemon-served   the node's dirty chunks; also a journal
//	  O_WRONLY of a non-empty file,                      write record, before the write is
//	  O_WRONLY|O_APPEND of one past                      acknowledged, while the namespace is
//	  64 MiB, any O_SYNC/O_DSYNC, setuid/                unchanged since the durable head
//	  setgid/caps, the fallbacks below
//	O_WRONLY|O_APPEND of a file up to    appender        the node's backing file (a copy of the
//	  64 MiB, an empty one included      passthrough     content), unseen by the daemon until
//	  (Pi, Claude Code transcripts)                      an ingest takes its new tail
//	O_WRONLY without O_APPEND of an      staged          a new staging file, which holds the
//	  empty file with no backing file,   passthrough     content until it is absorbed into the
//	  or one O_TRUNC empties                             node's write buffers (the absorber
//	  (`cmd > file`)                                     after the last close, or a flush)
//	O_RDWR, or O_WRONLY without          wild backing    the backing file, which every ingest
//	  O_APPEND, joining an appender      passthrough     from then on compares whole
//	O_RDWR or O_WRONLY joining a staged  staged          the staging file, as the staged row
//	  file (routeJoin; a reader of a     passthrough     (its fingerprint shows every write)
//	  staged file reads it too)
//	a shared writable mapping (mmap      its             served: the kernel's pages of the file,
//	  MAP_SHARED|PROT_WRITE, which       descriptor's    written back as WRITEs (never appends)
//	  needs O_RDWR)                                      at msync, fsync or the kernel's own
//	                                                     write-back, then as a served write;
//	                                                     passthrough: the backing file itself
//
// When a write is kept:
//
//	route          across a kill -9 of the daemon        across a power loss
//	-------------  ------------------------------------  ------------------------------------
//	daemon-served  once acknowledged, while the          after an fsync (journal or flush),
//	               namespace is unchanged since the      an O_SYNC/O_DSYNC write, the
//	               durable head (write record);          periodic flush, a capture, an
//	               otherwise as across a power loss      unmount
//	appender,      after the next fsync of the file, or  the same
//	  wild         the next flush, which ingests it (the
//	               periodic one comes for a backing file
//	               with bytes not yet ingested)
//	staged         after an fsync (the staging file is   the same
//	               fdatasynced, named, and recorded in
//	               the journal: a stage record), a
//	               capture, an unmount, or the first
//	               flush after an absorb: the absorber
//	               (after the last close) only moves the
//	               content into write buffers; the
//	               periodic flush absorbs a file still
//	               open once it stayed idle an interval
//	mapping,       once the kernel wrote the pages back  after an fsync or msync(MS_SYNC),
//	  served       (as a served write); a store still    which write the pages back first,
//	               in the kernel's pages when the        or as the served row once they were
//	               daemon dies is lost
//	mapping,       as its backing file's row (wild or    the same; an msync syncs only the
//	  passthrough  staged), but while a mapping may      backing file, which nothing reads
//	               write the file every look at it       after a crash
//	               (ingest, absorb) reads it whole, as
//	               no fingerprint shows a store into a
//	               dirty page; the periodic flush
//	               ingests a wild one every interval
//
// Until then a kill -9 loses what a passthrough write, or a served write
// after a namespace change, left only in memory or in an unnamed backing
// file. Lost changes never damage anything: nothing stored is modified
// and the head moves only by an atomic commit.
//
// An open the table gives a passthrough route is served by the daemon
// (routeDaemon) instead in a read-only session, or an engine with no store directory (no
// backing directory); a release in flight in the mount (go-fuse gives back
// the backing id of a node's last passthrough handle only after its
// Release returned, and an open handed that id in between would leave the
// node with an id the kernel refuses); a node the mount already has open
// through the daemon (openRoute); Options.NoStaging, or a backing
// directory without multigrain ctimes (Session.stagingOK), for a writer
// of an empty file; a node that has a backing file already (through
// another mount) for such a writer; no staging file ready in the pool
// (errNoStagingFile: the daemon serves a new file as fast as a new inode
// would come); and any other failure to get a backing file (a full disk),
// which is logged. A joining open whose backing file fails fails instead:
// the kernel would refuse it as a daemon-served one. A daemon-served open
// of a node with a backing file no passthrough handle uses takes it over
// (Session.serveOpen), and a read, write, truncate, fallocate or
// copy_file_range the daemon serves of a staged file unstages it.
//
// # Lock order
//
// This is the one authoritative order (docs/ARCHITECTURE.md points here).
// Acquire left to right; the leaves are never held while taking another
// lock:
//
//	Recorder.gcMu < Engine.mu < Session.freeze < fnode.openMu < dirHandle.mu
//	    < Session.treeMu < node.mu < Session.dirtyMu
//	leaves: chunkCache.mu, pendingChunks.mu, pendingBatch.mu, orphans.mu,
//	        openFiles.mu, backedSet.mu, sparePool.mu, absorbQueue.mu,
//	        workers.mu, journal.mu, Recorder.mu, dirStreams.mu,
//	        uringSwitch.mu; fusefs/uring's ring.mu
//
// Why, lock by lock:
//
//   - Recorder.gcMu admits one collection at a time; the collection syncs
//     every session under it.
//   - Engine.mu guards the maps of live sessions and mounts; it is never
//     held across I/O.
//   - Session.freeze (an RWMutex) is held shared by every mutating
//     operation and exclusively by flush, capture, restore and graft, so
//     a snapshot is one instant of the whole session. Reads do not take
//     it.
//   - fnode.openMu guards a mount's count of open and passthrough handles
//     of a node; an open holds freeze shared around it, so a backing file
//     never appears in the middle of a flush.
//   - dirHandle.mu guards one directory stream; a listing under it takes
//     treeMu, node.mu (the directory's atime) and dirStreams.mu.
//   - Session.treeMu guards the structure: children maps, parent links,
//     link counts. node.mu guards a node's attributes and file content,
//     its backing file included. Session.dirtyMu guards the set of nodes
//     changed since the last flush and metaDirty.
//   - A served write finds its file's durable path (writePath, under
//     treeMu) before it takes node.mu, and puts its write record into the
//     journal under node.mu, so records of one file are in the order of
//     its writes; freeze held shared keeps a flush from emptying the
//     journal in between, and any namespace change in between sets
//     metaDirty, which logWrite reads under node.mu. A journaled fsync
//     holds freeze shared, reads metaDirty and the file's path under
//     treeMu, then copies the written ranges under node.mu.
//   - The absorber and a flush's preflush take freeze shared, then treeMu
//     (to see whether the node still has a name) and release it, then
//     node.mu; an fsync of a staged file names it under node.mu and takes
//     journal.mu only after freeze shared and treeMu. The absorber
//     recycles a staging file with no lock held. A background spill and a
//     preflush take freeze shared for one step of 8 MiB at a time
//     (spillInSteps), then each file's node.mu in turn. The goroutines
//     that use the store for a session start only while it is open
//     (checked under workers.mu with the count taken).
//   - The kernel is told of invalidations only with no lock held: it may
//     call back into the mount. This also keeps the rings live: a ring
//     thread serving a request inline holds up the other requests of its
//     CPU, so no handler may wait for a FUSE request.
package fusefs
