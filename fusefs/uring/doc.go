// Package uring serves a FUSE mount through FUSE over io_uring (Linux
// 6.14+, fs/fuse/dev_uring.c): the transport of fusefs's mounts when the
// host's switch lets the kernel offer it (fusefs.URingMode decides that).
//
// The kernel keeps one request queue per possible CPU and queues each
// request on the queue of the CPU that made it; the daemon registers
// buffers for every queue through IORING_OP_URING_CMD on the /dev/fuse
// descriptor and answers each request with a COMMIT_AND_FETCH that also
// waits for the next one. A ring thread pinned to the queue's CPU
// therefore serves a request where it was made: no cross-CPU wakeup on the
// way in or out, which on a VM is most of the cost of a FUSE round trip
// (docs/BENCHMARKS.md).
//
// # Terms
//
//   - Queue: the kernel's requests from one CPU, for one connection.
//   - Entry: one buffer pair registered on a queue (the 288-byte
//     fuse_uring_req_header and a payload of max_write), outside the Go
//     heap; queueDepth of them per queue, each holding one request at a
//     time. A mount's entries, and the buffer its /dev/fuse is read into,
//     are one mapping, touched only as far as requests fill it.
//   - Ring thread (ring): one io_uring, and a goroutine locked to its
//     thread that serves it. The process has one a CPU (several CPUs a
//     ring past maxThreads), shared by every mount (a ring set, the
//     pool's current one): a ring holds the entries of its CPU's queue of
//     every connection, and the /dev/fuse reads of some of them. The ring
//     threads start with the first mount and end once the last has. A
//     ring that fails aborts the connections it served (their requests
//     from its CPU would wait for ever), and the next mount starts a new
//     set; a mount registering on it then fails (errRingFailed), aborted
//     and detached. A handler that panics is answered EIO, as go-fuse
//     answers it over /dev/fuse.
//   - Inline, deferred: a request is served on the ring thread, or handed
//     to a goroutine that gives the entry back through the ring's eventfd
//     (deferred: large writes and requests that may wait long). A READ,
//     OPEN, WRITE, SETATTR, FSYNC or FSYNCDIR is tried inline on local data alone
//     (LocalServer, localOps) and deferred when it needs a remote: a ring
//     thread never waits for a network.
//
// # Design
//
// go-fuse answers INIT: Mount opens /dev/fuse and mounts the directory
// itself (go-fuse cannot hand over its descriptor), gives go-fuse the
// descriptor as /dev/fd/N, and fuse.NewServer reads and answers INIT.
// go-fuse's Serve, which would wait in read(2) on a thread of its own for
// the FORGET and INTERRUPT that the kernel never sends through a ring,
// does not run while the rings serve the connection: a ring reads the
// descriptor (IORING_OP_READ, which the kernel polls, on a descriptor made
// non-blocking), passes FORGETs on to the file system and answers an
// INTERRUPT ENOSYS (no handler can be interrupted; the kernel finds no
// /dev/fuse request of that number and drops the answer). Serve runs once the connection has ended and the rings
// hold nothing of it, to close the descriptor and tell the file system;
// or at once, if the kernel refused a REGISTER and went back to
// /dev/fuse. The rings decode every other request from their buffers and
// call the same fuse.RawFileSystem, so both transports share one
// implementation of every operation. The entries are built before the
// mount: once INIT has agreed to io_uring, the kernel holds every request
// until all queues are registered, so no part may fail after it.
//
// Nothing in the kernel ties a connection to one io_uring
// (fs/fuse/dev_uring.c): a command finds its connection by the file it
// names and its queue by the qid it carries; the kernel completes a
// request on the task that submitted the command (the ring thread), into
// the buffers that REGISTER named; and ending a connection (unmount,
// abort) completes that connection's commands alone, with ENOTCONN. A
// command names the descriptor itself, not a registered file: it stays
// open until every command of it has come back, since go-fuse closes it
// only in Serve.
//
// The decoder (decode_linux.go) is a table of handlers by opcode.
// go-fuse's only seam for another transport, the experimental
// fuse.ProtocolServer.HandleRequest of its virtio-fs server, is a protocol
// server of its own that never sees the /dev/fuse INIT, wants the request
// as one stream (so the ring's per-opcode header sizes would still be
// ours to know), and allocates per request and shares one in-flight lock
// across CPUs: BenchmarkServe measures it at 0.7–1.8 µs and two to four
// allocations (1 KiB) a request, where the table takes 0.03–0.14 µs and
// allocates only a name's string, against a 3.7 µs SETATTR round trip
// over the rings.
//
// # Files
//
//	ioring_linux.go   the io_uring ABI: setup, submission and completion
//	server_linux.go   a mount's part: its buffers, registration, its end
//	rings_linux.go    the ring threads, shared by every mount; /dev/fuse
//	sched_linux.go    the ring threads' scheduling policy (SCHED_BATCH)
//	decode_linux.go   a request to a RawFileSystem call and its reply
//	mount_linux.go    Mount and the Server's exported methods
//	kernelorder*.go   the kernel's reply-then-request order, for -race
//
// A pinned ring thread waits for requests as SCHED_BATCH, so that a
// request nobody waits for (the RELEASE of every close) does not preempt
// the process that sent it; after a READ or WRITE, and while a request is
// deferred, it waits as SCHED_NORMAL (sched_linux.go says why).
//
// # Locks
//
// ringPool.mu guards starting and stopping the ring threads; it is
// taken before a ring's mu (release posts the stop). ring.mu is a leaf:
// it guards a ring's mail (entries finished by goroutines, mounts to
// register or read, the stop) and its eventfd, which a poster writes and
// the ring thread closes under it. Everything else of a ring (its
// io_uring, its slots, its entries' state) belongs to the ring thread
// alone. Server.regMu guards the first REGISTER refused, Server.unmountMu
// the Unmount once.
package uring
