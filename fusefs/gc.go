package fusefs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// Garbage collection's protocol: see doc.go, Garbage collection.

// Recorder is a cas.Store that can record the refs put into it while a
// garbage collection runs. An Engine wraps its store in one (see New); a
// catalog used beside the Engine should be built over the same Recorder
// (Record), so that its puts (snapshot records, empty trees) are recorded
// too.
type Recorder struct {
	cas.Store

	mu        sync.Mutex
	recording bool                 // GUARDED_BY(mu)
	active    atomic.Bool          // mirrors recording, read without mu
	seen      map[cas.Ref]struct{} // refs put while recording; GUARDED_BY(mu)
	group     *opGroup             // operations begun in the current epoch; GUARDED_BY(mu)
	idle      chan struct{}        // closed when the running collection ends; GUARDED_BY(mu)

	gcMu sync.Mutex // one collection at a time
}

// opGroup counts operations begun in one gc epoch.
type opGroup struct {
	n      int           // GUARDED_BY(Recorder.mu)
	sealed bool          // no new members; GUARDED_BY(Recorder.mu)
	done   chan struct{} // closed when sealed and n == 0
}

// Record returns store wrapped in a Recorder, or store itself if it is one.
func Record(store cas.Store) *Recorder {
	if r, ok := store.(*Recorder); ok {
		return r
	}
	return &Recorder{Store: store, group: &opGroup{done: make(chan struct{})}}
}

// noteData records the ref of data when a collection is recording. Off a
// collection it costs one atomic load: the hash is computed only while
// recording. A put that saw recording off and stores while it starts is
// safe: it runs under a session's freeze lock (or under Guard), and a
// collection waits for both before it marks.
func (r *Recorder) noteData(data []byte) {
	if !r.active.Load() {
		return
	}
	ref := cas.Sum(data)
	r.mu.Lock()
	if r.recording {
		r.seen[ref] = struct{}{}
	}
	r.mu.Unlock()
}

// Put records the ref (when recording) before storing, so that a sweep
// that deletes the chunk either sees it recorded or runs before the put.
func (r *Recorder) Put(ctx context.Context, data []byte) (cas.Ref, error) {
	r.noteData(data)
	return r.Store.Put(ctx, data)
}

// NewBatch returns a batch whose puts are recorded.
func (r *Recorder) NewBatch() cas.Batch { return &recordingBatch{Batch: r.Store.NewBatch(), r: r} }

// Headroom forwards to the wrapped store; ok is false when it sets no
// limit.
func (r *Recorder) Headroom() (int64, bool) {
	if m, ok := cas.MeterOf(r.Store); ok {
		return m.Headroom()
	}
	return 0, false
}

// NewHeldBatch returns a recorded batch for data accepted under Headroom.
func (r *Recorder) NewHeldBatch() cas.Batch {
	if m, ok := cas.MeterOf(r.Store); ok {
		return &recordingBatch{Batch: m.NewHeldBatch(), r: r}
	}
	return r.NewBatch()
}

// CorruptForTest forwards to the wrapped store when it supports it.
func (r *Recorder) CorruptForTest(ref cas.Ref) error {
	c, ok := r.Store.(cas.Corrupter)
	if !ok {
		return errors.New("fusefs: store cannot corrupt chunks")
	}
	return c.CorruptForTest(ref)
}

// GetMany passes through to the store's (cas.GetMany).
func (r *Recorder) GetMany(ctx context.Context, refs []cas.Ref) ([][]byte, []error) {
	return cas.GetMany(ctx, r.Store, refs)
}

// GetManyInto passes through to the store's (cas.GetManyInto).
func (r *Recorder) GetManyInto(ctx context.Context, refs []cas.Ref, bufs [][]byte) ([][]byte, []error) {
	return cas.GetManyInto(ctx, r.Store, refs, bufs)
}

// Unwrap returns the wrapped store.
func (r *Recorder) Unwrap() cas.Store { return r.Store }

type recordingBatch struct {
	cas.Batch
	r *Recorder
}

func (b *recordingBatch) Put(data []byte) (cas.Ref, error) {
	b.r.noteData(data)
	return b.Batch.Put(data)
}

// enter registers an operation in the current epoch; the returned func
// ends it. While a collection runs it waits for the collection's end: an
// operation that names an object it found stored rather than put (a bind
// of a source's entries, a pull skipping what is present) is seen by no
// recording, and would name an object the sweep deletes. No operation
// under Guard enters again (a nested enter would wait for a collection
// that waits for it).
func (r *Recorder) enter() func() {
	r.mu.Lock()
	for r.recording {
		idle := r.idle
		r.mu.Unlock()
		<-idle
		r.mu.Lock()
	}
	g := r.group
	g.n++
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			g.n--
			if g.n == 0 && g.sealed {
				close(g.done)
			}
			r.mu.Unlock()
		})
	}
}

// startRecording turns recording on and waits for the operations of the
// previous epoch to end.
func (r *Recorder) startRecording(ctx context.Context) error {
	r.mu.Lock()
	r.recording = true
	r.idle = make(chan struct{})
	r.active.Store(true)
	r.seen = make(map[cas.Ref]struct{})
	old := r.group
	r.group = &opGroup{done: make(chan struct{})}
	old.sealed = true
	if old.n == 0 {
		close(old.done)
	}
	r.mu.Unlock()
	select {
	case <-old.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Recorder) stopRecording() {
	r.mu.Lock()
	if r.recording {
		close(r.idle)
	}
	r.recording = false
	r.active.Store(false)
	r.seen = nil
	r.mu.Unlock()
}

// deleteUnrecorded deletes the refs not put since recording started, under
// the lock that orders it with puts. It returns the refs deleted.
func (r *Recorder) deleteUnrecorded(ctx context.Context, refs []cas.Ref) ([]cas.Ref, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	del := refs[:0:0]
	for _, ref := range refs {
		if _, ok := r.seen[ref]; !ok {
			del = append(del, ref)
		}
	}
	if len(del) == 0 {
		return nil, nil
	}
	return del, r.Store.Delete(ctx, del...)
}

// Guard runs fn as one operation that gc must not interleave with: a
// collection starting meanwhile waits for fn to return before it marks,
// and fn waits for a collection running when it starts (enter).
// Use it around work that puts objects and only later names them (a
// capture, a fork, an import building a tree before creating its session).
func (e *Engine) Guard(fn func() error) error {
	done := e.recorder().enter()
	defer done()
	return fn()
}

// recorder returns the Engine's Recorder.
func (e *Engine) recorder() *Recorder {
	if r, ok := e.store.(*Recorder); ok {
		return r
	}
	panic("fusefs: engine store is not a Recorder")
}

// SyncAll flushes every live session durably.
func (e *Engine) SyncAll(ctx context.Context) error {
	sessions := e.liveSessions()
	var errs []error
	for _, s := range sessions {
		if err := e.sync(ctx, s); err != nil && !errors.Is(err, catalog.ErrNoSession) {
			errs = append(errs, fmt.Errorf("flush %s: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}

// GCPhase names a step of a collection, for progress reports.
type GCPhase string

const (
	GCSync  GCPhase = "sync"
	GCMark  GCPhase = "mark"
	GCSweep GCPhase = "sweep"
)

// GCProgress is reported while a collection runs.
type GCProgress struct {
	Phase GCPhase `json:"phase"`
	Done  int64   `json:"done"`
	Total int64   `json:"total,omitempty"` // 0 when unknown
}

// GCResult is what a collection did.
type GCResult struct {
	Scanned     int64         `json:"scanned"`      // chunks in the store before the sweep
	Reachable   int64         `json:"reachable"`    // chunks marked
	Freed       int64         `json:"freed"`        // chunks deleted
	FreedBytes  int64         `json:"freed_bytes"`  // their plain bytes
	FreedStored int64         `json:"freed_stored"` // their stored bytes
	Duration    time.Duration `json:"duration_ns"`
}

// sweepBatch is how many refs one delete (and one hold of the recorder's
// lock) covers.
const sweepBatch = 512

// GC removes every chunk that no session head, snapshot record or mount
// reaches, while sessions stay mounted and writable; see the protocol
// above. progress, when non-nil, is called from the collecting goroutine.
func (e *Engine) GC(ctx context.Context, progress func(GCProgress)) (*GCResult, error) {
	start := time.Now()
	report := func(p GCProgress) {
		if progress != nil {
			progress(p)
		}
	}
	r := e.recorder()
	r.gcMu.Lock()
	defer r.gcMu.Unlock()
	if err := r.startRecording(ctx); err != nil {
		r.stopRecording()
		return nil, fmt.Errorf("gc: wait for operations in progress: %w", err)
	}
	defer r.stopRecording()

	report(GCProgress{Phase: GCSync})
	if err := e.SyncAll(ctx); err != nil {
		return nil, fmt.Errorf("gc: %w", err)
	}

	marked := make(map[cas.Ref]struct{})
	mark := func(ref cas.Ref) error {
		marked[ref] = struct{}{}
		if len(marked)%4096 == 0 {
			report(GCProgress{Phase: GCMark, Done: int64(len(marked))})
		}
		return nil
	}
	if err := catalog.Reachable(ctx, r.Store, mark); err != nil {
		return nil, fmt.Errorf("gc: mark: %w", err)
	}
	for _, root := range e.readOnlyRoots() {
		if err := markTree(ctx, r.Store, root, marked); err != nil {
			return nil, fmt.Errorf("gc: mark read-only mount: %w", err)
		}
	}
	if err := e.markOpenFiles(ctx, marked); err != nil {
		return nil, fmt.Errorf("gc: mark open files: %w", err)
	}
	report(GCProgress{Phase: GCMark, Done: int64(len(marked))})

	res := &GCResult{Reachable: int64(len(marked))}
	var candidates []cas.ChunkInfo
	err := r.Store.Enumerate(ctx, func(ci cas.ChunkInfo) error {
		res.Scanned++
		if _, ok := marked[ci.Ref]; !ok {
			candidates = append(candidates, ci)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("gc: enumerate: %w", err)
	}
	report(GCProgress{Phase: GCSweep, Total: int64(len(candidates))})
	sizes := make(map[cas.Ref]cas.ChunkInfo, len(candidates))
	for _, ci := range candidates {
		sizes[ci.Ref] = ci
	}
	for i := 0; i < len(candidates); i += sweepBatch {
		end := min(i+sweepBatch, len(candidates))
		refs := make([]cas.Ref, 0, end-i)
		for _, ci := range candidates[i:end] {
			refs = append(refs, ci.Ref)
		}
		deleted, err := r.deleteUnrecorded(ctx, refs)
		if err != nil {
			return nil, fmt.Errorf("gc: delete: %w", err)
		}
		for _, ref := range deleted {
			res.Freed++
			res.FreedBytes += sizes[ref].Size
			res.FreedStored += sizes[ref].StoredSize
		}
		report(GCProgress{Phase: GCSweep, Done: int64(end), Total: int64(len(candidates))})
	}
	if err := r.Store.Sync(ctx); err != nil {
		return nil, fmt.Errorf("gc: sync: %w", err)
	}
	res.Duration = time.Since(start)
	e.log.Info("gc done", "scanned", res.Scanned, "reachable", res.Reachable, "freed", res.Freed, "freed_bytes", res.FreedBytes)
	return res, nil
}

// readOnlyRoots returns the stored roots shown by read-only mounts; a
// read-only view of a session keeps the root it was mounted with even
// after the session moves on.
func (e *Engine) readOnlyRoots() []cas.Ref {
	e.mu.Lock()
	defer e.mu.Unlock()
	var roots []cas.Ref
	for _, m := range e.mounts {
		if m.sess.readOnly {
			roots = append(roots, m.sess.flushed)
		}
	}
	return roots
}

// markOpenFiles adds the chunks of every file open in a live session to
// marked. Chunks such a file stores later are recorded.
func (e *Engine) markOpenFiles(ctx context.Context, marked map[cas.Ref]struct{}) error {
	for _, s := range e.liveSessions() {
		for _, n := range s.open.list() {
			if err := n.markChunks(ctx, marked); err != nil {
				return err
			}
		}
	}
	return nil
}

// markChunks adds the chunks file n refers to now to marked.
func (n *node) markChunks(ctx context.Context, marked map[cas.Ref]struct{}) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.loadChunks(ctx); err != nil {
		return err
	}
	cl := n.data.chunks
	for i := range cl.Len() {
		if ref := cl.At(i); !ref.IsZero() {
			marked[ref] = struct{}{}
		}
	}
	return nil
}

// openFiles counts the open handles of files, by node.
type openFiles struct {
	mu    sync.Mutex
	nodes map[*node]int // GUARDED_BY(mu)
}

func (o *openFiles) add(n *node) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.nodes == nil {
		o.nodes = make(map[*node]int)
	}
	o.nodes[n]++
}

func (o *openFiles) remove(n *node) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.nodes[n]--; o.nodes[n] <= 0 {
		delete(o.nodes, n)
	}
}

// has reports whether n has an open handle.
func (o *openFiles) has(n *node) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nodes[n] > 0
}

// list returns the files with an open handle.
func (o *openFiles) list() []*node {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]*node, 0, len(o.nodes))
	for n := range o.nodes {
		out = append(out, n)
	}
	return out
}

// markTree adds every ref reachable from root to marked.
func markTree(ctx context.Context, g cas.Getter, root cas.Ref, marked map[cas.Ref]struct{}) error {
	return manifest.WalkRefs(ctx, g, root, func(ref cas.Ref, _ manifest.RefKind, _ string) error {
		if _, ok := marked[ref]; ok {
			return manifest.SkipSubtree
		}
		marked[ref] = struct{}{}
		return nil
	})
}
