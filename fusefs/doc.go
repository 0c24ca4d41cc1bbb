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
//   - Journal: per session, every change the daemon served since the
//     durable head, in order (names, attributes, writes: records in the
//     page cache, synced by an fsync), and the byte ranges of fsyncs that a
//     full flush would cost too much for; replayed after a crash (see The
//     journal).
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
//   - Local first: an operation under cas.LocalOnly, which a chunk that
//     only a remote has fails with cas.ErrNotLocal before it changes
//     anything. A ring thread serves READ, OPEN, WRITE, SETATTR and FSYNC
//     so (localGate, the gate's uring.LocalServer view) and hands the
//     rest to a goroutine. Off the ring, Session.Read, fnode.open (a copy
//     into a backing file), Session.Write (writeReady), a truncate and a
//     hole punched (zeroReady) try so under their locks, fetch what is
//     missing with no lock held and try again (Session.localFirst); a
//     flush fetches its overlays' bases first (fetchBases).
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
// that of a mount's first open of the node. A daemon-served descriptor
// that appends is opened FOPEN_DIRECT_IO (fnode.openOnce), so that each
// write(2) is one WRITE.
//
//	descriptor                           route           the write lands in
//	-----------------------------------  --------------  ---------------------------------------
//	O_RDWR (Codex's rollout, SQLite),    daemon-served   the node's dirty chunks; also a journal
//	  O_WRONLY of a non-empty file,                      write record, before the write is
//	  O_WRONLY|O_APPEND of one past                      acknowledged, unless a change since
//	  64 MiB, any O_SYNC/O_DSYNC, setuid/                the durable head is not journaled
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
//	daemon-served  once acknowledged (write record),     after an fsync (journal or flush),
//	               unless a change since the durable     an O_SYNC/O_DSYNC write, the
//	               head is not journaled (metaDirty);    periodic flush, a capture, an
//	               then as across a power loss           unmount
//	appender       once acknowledged: a live record in   after the next fsync of the file, or
//	               the journal names the backing file    the next flush, which ingests it (the
//	               (every one has a name from birth), so periodic one comes for a backing file
//	               a replay takes the content from it    with bytes not yet ingested)
//	               (liveBacking); every reset records
//	               the files still live again
//	               (resetJournal), and a drop puts the
//	               content of a small file into the
//	               journal (dropRecords)
//	wild           as an appender (a writer's open       the same
//	               records the file live)
//	staged         as an appender: a live record at the  after an fsync (the staging file is
//	               open, the content journaled with the  fdatasynced, its name made durable,
//	               file's drop                           and a stage record journaled), a
//	                                                     capture, an unmount, or the first
//	                                                     flush after an absorb
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
// Until then a kill -9 loses what a write after a change the journal
// could not take (metaDirty: it was full, or a record failed) left only in
// memory or in a backing file no record names. Lost changes never damage
// anything: nothing stored is modified and the head moves only by an
// atomic commit.
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
// # Passthrough appenders (passthrough.go)
//
// The kernel sends a passed-through appender's writes straight to the
// backing file, with no round trip to the daemon (a 600-byte append costs
// about what it costs on ext4, where a FUSE write costs 13–18 µs). The
// daemon does not see them, so the backing file is the authority for bytes
// past what the node holds, and ingest folds its new tail into the node
// (as writes: chunk buffers, journal spans) whenever the daemon needs the
// content: on getattr, read, write, truncate, fsync and every flush.
// Appends only grow a file, so the tail since the last ingest is exactly
// what changed: a capture costs the appended bytes, never the file.
//
// A flush ingests every backed file under the freeze lock and then checks
// that none grew meanwhile (retrying if one did), so the snapshot holds
// every backed file as it was at one instant, with the rest of the session
// frozen (ingestAll).
//
// The kernel requires that while one open of an inode is passthrough,
// every open of it is (else it fails the open with EIO), so a mount starts
// passthrough for a node only when it has no open handle of it, and then
// answers every open of that node with passthrough until the last closes.
// Such an open that may write elsewhere than at the end makes the backing
// file wild: its whole content is ingested from then on, which costs the
// file's size but stays correct. A store through a shared writable mapping
// into a page already dirty changes neither the file's size nor its times,
// and a mapping outlives its descriptor, so while a mapping may write a
// backing file (backing.mappable) every ingest reads it whole, and the
// file is kept until none can. Files with setuid, setgid or capabilities
// never get passthrough (the kernel would not drop them on write), nor
// files past maxBacked (the copy on open).
//
// # Staged files (staged.go)
//
// A staged file's writes cost what they cost on the disk under the store,
// with no round trip and no hashing on the write path. The content enters
// the store when it is absorbed:
//
//   - by a capture, a graft, Sync and Close: every staged file, so that a
//     snapshot holds everything written before it;
//   - by the session's absorber once the last passthrough handle closed
//     (a big file a second later: absorbHold), or by any flush that finds
//     it closed first (the file is then dropped), and by any flush when an
//     fsync made content durable that no durable head holds (see below);
//   - by the periodic flush when it stays open but went idle (idleState);
//   - when the daemon needs the content itself: the file is then
//     unstaged, and kept current as a wild backing file is.
//
// Absorbing reads the staging file and writes into the node the chunks
// that differ from what it holds (into write buffers, which a flush
// stores), so a file absorbed again costs a read and a hash of it, and
// nothing when its fingerprint (size, mtime, ctime) is unchanged. A big
// file's staging file stays its node's read copy once absorbed (kind
// kept), so that later readers read it through passthrough.
//
// A flush absorbs under the freeze lock and then checks that no absorbed
// file's fingerprint changed (retrying if one did, as for appenders), so a
// snapshot holds each staged file as it was at one instant with the rest
// of the session frozen. That check needs a ctime that changes on every
// write, which Linux's multigrain timestamps give (6.13+, ext4, xfs,
// btrfs, tmpfs); a session probes its backing directory once and stages
// nothing where they are missing.
//
// Durability against a crash of the daemon: a staging file has a name in
// the backing directory from birth (makeBackingFile), and the writer's
// open puts a live record of it into the journal, so a replay takes the
// file's content from it. When the file is dropped (the absorber, a
// flush), a small one (under absorbHoldMin) gets a detach record followed
// by its content, whole, and goes back to the pool, keeping its name: a
// replay reads nothing from a recycled file. Any other gets an unlive
// record (the replay reads it then) and is closed, its name removed at the
// next reset. A reset records every file still live again, as the new
// incarnation's first records, written with its header (resetJournal), and
// a journal filling past half asks the periodic flush goroutine for a
// flush at once (flushSoon). Before a flush moves
// the head it appends a next block for that head (journalNext): a load
// after a crash between the head's move and the reset finds a journal of
// the old head, and applies that block alone (forHead).
//
// Durability against a power loss: an fsync of a staged file fdatasyncs
// the staging file, syncs the backing directory once (the name) and
// appends a stage record (the file's journal id, the staging file's name
// and the size synced) to the journal; a replay reads the content back
// from the staging file, which is never recycled (pinned). Every durable
// head move empties the journal, so a flush absorbs every staged file
// with such content (stageState.fsynced) first, and a staging file's name
// is removed only once a journal reset follows its drop
// (removeStaleBackings).
//
// # The journal (journal.go)
//
// Every change the daemon serves is a record in a per-session journal
// before it is acknowledged: a create, link, unlink, rmdir or rename
// (under treeMu), a truncate or fallocate (under node.mu), the attributes
// of each node a change touched, and every write (logWrite). Records are
// copied into a shared mapping of the file with no sync: a crash of the
// daemon leaves them in the page cache, and the next daemon replays them,
// so no acknowledged change is lost to a kill -9. An fsync of a file then
// only fdatasyncs the journal (with the ranges of writes the journal did
// not take, read back), instead of flushing the session into the store
// and syncing Badger's logs twice; an fsync of a directory flushes (it is
// how `sync DIR` makes staged files durable, whose bytes the journal
// holds only as a live record of their staging files, which a power loss
// may leave without the bytes). Every full flush empties the journal.
//
// Records name nodes by journal id (jops.go): 1 is the root; a node the
// durable head has gets an id with a bind record (its path then), a node
// made since gets one with its create record; ids last one incarnation of
// the journal (reset to reset). Attribute records carry a version taken
// under node.mu, so that a replay keeps the newest whatever order two
// operations wrote theirs in. An operation's records go into the journal
// in one piece. A change the journal cannot take (full, a write error, a
// graft, a link of an O_TMPFILE made before the last reset, a backing
// file that shrank) sets metaDirty: from then until the next durable
// flush the journal takes nothing, so what it replays is always the
// durable head plus a prefix of the changes made since.
//
// A journal applies to one durable head: its header holds the head's
// generation. On load, a journal whose generation is the head's is
// replayed (its records in order, through the session's own operations;
// a file's last stage record supersedes its content's records before it)
// and then flushed; any other is stale (a flush moved the head after the
// journal was written) and is discarded.
//
// The file is preallocated (written with zeros ahead of the records) and
// overwritten in place, never truncated by a reset: an fdatasync then
// writes data blocks only, with no journal commit of the file's size,
// which costs a third less than an append on ext4. So that records left
// from before a reset are never taken for new ones, every reset picks a
// fresh random nonce, written in the header and in every record; a record
// counts only if its CRC holds and its nonce is the header's. A write
// record carries the file's mtime and ctime once the write was served,
// which its replay restores. A crash tears at most the last record: a
// record that fails its check with an intact record of the same nonce
// after it is damage, and the session is refused (ErrJournalDamaged)
// unless the engine salvages (Options.SalvageJournals).
//
// # Access times (atime.go)
//
// Access times are kept as Linux's relatime keeps them: a read sets a
// file's atime when the atime is not after its mtime or ctime (the first
// read since a change), or is a day old, and otherwise leaves it; a
// listing does the same for a directory, a readlink for a symlink. A
// noatime mount, a read-only one and an O_NOATIME descriptor set none.
//
// The kernel sets no atime on a FUSE inode itself (it marks every one
// S_NOATIME) but leaves them to the daemon, which sees a read only when
// it reaches it; an open is no read (a stat through an open descriptor
// must show the atime as it was). So:
//   - a READ, READDIR or READLINK the daemon serves counts;
//   - an open for reading whose read would set the atime does not keep
//     the pages the kernel cached (FOPEN_KEEP_CACHE), so that its reads
//     reach the daemon: once after a change, or a day;
//   - a passthrough reader's reads reach only the backing file, whose own
//     atime tells (the daemon reads it through an O_NOATIME descriptor,
//     while the kernel opens it anew for passthrough with the reader's
//     flags): once such a reader opened it, every fstat of it (a GETATTR,
//     which the kernel sends after a passthrough read, every flush, and
//     the drop of the backing file) applies a change of its atime to the
//     node. The backing file's relatime follows its own writes, not the
//     node's attributes, so where only those changed since the last read
//     (a chmod, a rename), the open sets the file's atime back to its
//     mtime, for its next read to move it.
//
// An atime change alone is a lazy one, as ext4's lazytime keeps it: it
// makes no flush due and does not end the journal's run (a read of a
// SQLite database between its writes would otherwise cost the next fsync
// a full flush), and it is stored by the next flush that stores anything
// else, and by every capture, sync and unmount. A kill -9 may lose it.
//
// # Directory listings (dirstream.go)
//
// A listing is "." and "..", then a sorted snapshot of a directory's
// names, taken on the first read of a directory stream and on every rewind
// (offset 0). Each snapshot gets an id, and the offset the kernel is given
// after an entry (its cookie) is the id and the number of entries read so
// far. Snapshots are also kept, a bounded number of them, in the mount's
// dirStreams, so a read at a cookie continues the same snapshot even when
// it arrives on a different handle: between rewinds a stream never skips
// or repeats a name that was there throughout (POSIX), however names come
// and go.
//
// That is what lets a mount that alone shows its part of the session
// answer OPENDIR with ENOSYS (rawGate.OpenDir). The kernel then stops
// sending OPENDIR and RELEASEDIR, one synchronous round trip per directory
// opened (git status opens every directory of the tree), and sends READDIR
// with no handle; the gate opens a handle for that one request, and the
// cookie finds the snapshot. The kernel keeps the listings it read (its
// default for no-opendir, as FOPEN_CACHE_DIR would ask), drops one itself
// when a name changes through this mount, checks a directory's mtime
// before reading its cached listing (auto_inval_data), and is told by
// restore and graft (NotifyContent). A mount that starts while another
// shows part of the same tree keeps OPENDIR, and asks for no listing
// cache; one that was alone and then gets an overlapping mount keeps
// no-opendir (the kernel decides it once per connection), and sees the
// other mount's changes once the directory's attributes expire, within
// shortCacheTimeout, as it sees their names.
//
// # Holes (sparse.go)
//
// A file's stored content is chunks at fixed offsets, and a chunk whose
// ref is zero is a hole: a flush stores no chunk that is all zeros
// (putChunk), a punched or zeroed range of whole chunks becomes holes
// (punchHole), a grow leaves holes past the old end (growTo), and an
// absorbed staged file keeps its zero chunks holes (putBack). So which
// parts of a file may hold data is known per chunk without reading any:
// st_blocks counts the chunks that are not holes, rounded up to ext4's
// 4 KiB blocks, and SEEK_DATA and SEEK_HOLE report them, at chunk
// granularity (a write buffer, at block granularity). A file with a
// backing file has its content there, on the local disk, whose own
// st_blocks and lseek answer at the disk's granularity. st_blocks never
// counts less than the data a file holds: tools that take a file with no
// blocks for an empty one (cp, tar --sparse) would copy nothing.
//
// # Garbage collection (gc.go)
//
// Garbage collection runs while sessions are mounted and written:
//
//  1. Start recording: from now on every ref put into the store (directly
//     or through a batch) is added to a set, whether the chunk was new or
//     already present. Before recording starts, gc waits for every
//     operation begun earlier under Guard (captures, forks, imports: work
//     that puts objects and then names them) to finish.
//  2. Sync every live session, so that every chunk known only to memory
//     is reachable from a session head. (A write that put a chunk before
//     step 1 holds the session's freeze lock until the chunk is in the
//     in-memory tree; Sync waits for it.)
//  3. Mark everything reachable from session heads and indexed snapshot
//     records (catalog.Reachable; lineage links do not reach, so a
//     forgotten snapshot goes), and the roots of read-only and snapshot
//     mounts (a mounted snapshot stays readable even if forgotten).
//  4. Sweep: enumerate the store and delete chunks neither marked nor
//     recorded. The check against the recorded set and the delete happen
//     under the recorder's lock, and a put records before it stores, so a
//     chunk put again during the sweep is either kept or stored anew.
//  5. Stop recording.
//
// The chunks of every file open in a live session are roots too (marked
// after the heads): a file unlinked, or replaced by a restore, while open
// is named by no head, and its handles still read it. A file opened later
// was named when the sessions were synced, or is one of those.
//
// # Shutdown (shutdown.go)
//
// The engine's end (Close) must leave no dead mount and lose no write it
// acknowledged, also while files are open. A mount that will not unmount
// (busy) is detached lazily: it leaves the mount table at once, so nothing
// new can reach it and the same dir can be mounted again, while the files
// open in it keep being served. Once those are closed, or after the grace
// period, the connection is ended (fusectl's abort): the kernel then fails
// every request of it, so nothing can be acknowledged any more. The
// passthrough writers' backing files are sealed (immutable) next, since
// their writes never reach the daemon or the connection; and only then is
// every session flushed, so that the flush holds everything acknowledged.
//
// # Interrupts (nointr.go)
//
// The kernel sends INTERRUPT when the caller of a request is signalled,
// and go-fuse then closes the request's cancel channel, which cancels the
// operation's context: an fsync or a write could then fail with EINTR,
// which no local filesystem returns (ext4's are not interruptible) and few
// programs retry (SQLite reports an fsync's EINTR as an I/O error). No
// homefs operation waits on anything a signal could end (locks are the
// kernel's), so the gate answers every request as if no INTERRUPT came,
// as the rings do (INTERRUPT never reaches a request they serve).
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
//	        uringSwitch.mu, parkedCopies.mu; fusefs/uring's ring.mu
//
// Why, lock by lock:
//
//   - Recorder.gcMu admits one collection at a time; the collection syncs
//     every session under it.
//   - Engine.mu guards the maps of live sessions and mounts; it is held
//     across I/O only by the removal of a session, whose backing files
//     and journal go under it, so that no session of the same name loads
//     meanwhile (removeSession).
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
//   - A served write, a setattr, a fallocate and an xattr change find the
//     node's journal id (jidOf, under treeMu, which may write a bind
//     record) before they take node.mu, and put their records into the
//     journal under node.mu, so the records of one file's content are in
//     the order of its changes; a change of names puts its records under
//     treeMu, so records of names are in the order of the tree's changes.
//     freeze held shared keeps a flush from emptying the journal in
//     between; a change the journal could not take sets metaDirty, which
//     each record's writer reads under the same lock. A journaled fsync
//     holds freeze shared, finds the id under treeMu, then copies the
//     written ranges under node.mu.
//   - The absorber and a flush's preflush take freeze shared, then treeMu
//     (to see whether the node still has a name) and release it, then
//     node.mu; an fsync of a staged file syncs its name under node.mu
//     and takes journal.mu only after freeze shared and treeMu. A drop
//     journals the file's content under node.mu (dropRecords); the
//     absorber recycles a staging file with no lock held. A reset, with
//     freeze held exclusively, finds each live file's path under treeMu
//     and its state under node.mu (liveFiles), writes the records under
//     journal.mu alone, then sets the ids under treeMu and node.mu
//     (resetJournal). A background spill and a
//     preflush take freeze shared for one step of 8 MiB at a time
//     (spillInSteps), then each file's node.mu in turn. The goroutines
//     that use the store for a session start only while it is open
//     (checked under workers.mu with the count taken).
//   - The kernel is told of invalidations only with no lock held: it may
//     call back into the mount. This also keeps the rings live: a ring
//     thread serving a request inline holds up the other requests of its
//     CPU, so no handler may wait for a FUSE request.
//   - A read, an open that copies content into a backing file, a write,
//     a truncate, a fallocate and a flush fetch a chunk that only a
//     remote has with no lock held
//     (Local first, above), and never on a ring thread: a slow remote
//     holds up no stat or listing of the node, and no other request of
//     the CPU.
package fusefs
