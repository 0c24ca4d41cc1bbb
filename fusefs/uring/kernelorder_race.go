//go:build race

package uring

import "sync/atomic"

// kernelSeq tells the race detector what the kernel orders: a request
// that follows a reply (the caller got the reply, then made the request,
// perhaps from another CPU and so through another ring) happens after
// everything the daemon did before that reply, but the two ring threads
// meet only in the kernel, through memory the detector does not see. A
// ring thread adds to kernelSeq before it commits a reply and loads it
// when it takes a request, so that the detector sees that edge (for every
// earlier reply: more than the kernel promises, which may hide a race
// between two requests in flight at once, never report one that is not).
// Release builds, without the detector, leave it out.
var kernelSeq atomic.Uint64

func kernelReply()   { kernelSeq.Add(1) }
func kernelRequest() { kernelSeq.Load() }
