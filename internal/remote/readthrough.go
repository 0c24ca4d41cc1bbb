package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// ReadThroughOptions tune a ReadThrough.
type ReadThroughOptions struct {
	// ReadAhead is how many chunks past the one read are fetched in the
	// background along a hinted file; 0 means 8 (512 KiB), < 0 none.
	ReadAhead int
	// Workers bounds the background fetches in flight; 0 means 8.
	Workers int
	// MaxHinted bounds the chunks Hint remembers (about 100 bytes each);
	// 0 means 4 Mi (256 GiB of files).
	MaxHinted int
	Logger    *slog.Logger
}

// ReadThroughStats counts what a ReadThrough did.
type ReadThroughStats struct {
	Fetched    int64 // chunks fetched for a reader
	Prefetched int64 // chunks fetched ahead of a reader
	Bytes      int64 // plain bytes fetched, both kinds
	Failed     int64 // fetches that found no good copy
}

// ReadThrough is a cas.Store over a local store that fetches what the local
// store lacks (or holds damaged) from remotes, checks it against its ref,
// stores it locally and returns it. Everything but Get and HasMany goes to
// the local store unchanged, so it can be handed to fusefs.New as is: a
// mount then reads chunks lazily. Reading chunk i of a file that Hint has
// seen fetches the next ReadAhead chunks in the background.
type ReadThrough struct {
	cas.Store
	opts ReadThroughOptions
	log  *slog.Logger

	bg     context.Context // background fetches; canceled by Close
	stop   context.CancelFunc
	wg     sync.WaitGroup
	worker chan struct{} // one token per background fetch in flight

	mu       sync.Mutex
	remotes  []*Remote              // GUARDED_BY(mu)
	files    [][]cas.Ref            // chunk sequences of hinted files; GUARDED_BY(mu)
	pos      map[cas.Ref]filePos    // GUARDED_BY(mu)
	roots    map[cas.Ref]struct{}   // hinted roots; GUARDED_BY(mu)
	inflight map[cas.Ref]*fetchCall // GUARDED_BY(mu)

	fetched, prefetched, bytes, failed atomic.Int64
}

type filePos struct{ file, index int32 }

type fetchCall struct {
	done chan struct{}
	data []byte
	err  error
	// abandoned: the fetching caller's context ended, so err says
	// nothing about the chunk.
	abandoned bool
}

var (
	_ cas.Store      = (*ReadThrough)(nil)
	_ cas.IntoGetter = (*ReadThrough)(nil)
)

// NewReadThrough returns a ReadThrough over local that fetches from
// remotes, in order.
func NewReadThrough(local cas.Store, opts ReadThroughOptions, remotes ...*Remote) *ReadThrough {
	if opts.ReadAhead == 0 {
		opts.ReadAhead = 8
	}
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if opts.MaxHinted <= 0 {
		opts.MaxHinted = 4 << 20
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	bg, stop := context.WithCancel(context.Background())
	return &ReadThrough{
		Store:    local,
		opts:     opts,
		log:      log,
		bg:       bg,
		stop:     stop,
		worker:   make(chan struct{}, opts.Workers),
		remotes:  remotes,
		pos:      make(map[cas.Ref]filePos),
		roots:    make(map[cas.Ref]struct{}),
		inflight: make(map[cas.Ref]*fetchCall),
	}
}

// AddRemote appends r to the remotes asked on a local miss.
func (t *ReadThrough) AddRemote(r *Remote) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, have := range t.remotes {
		if have == r {
			return
		}
	}
	t.remotes = append(t.remotes, r)
}

// RemoveRemote stops asking r on a local miss.
func (t *ReadThrough) RemoveRemote(r *Remote) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.remotes = slices.DeleteFunc(slices.Clone(t.remotes), func(have *Remote) bool { return have == r })
}

// Stats returns the fetch counters.
func (t *ReadThrough) Stats() ReadThroughStats {
	return ReadThroughStats{Fetched: t.fetched.Load(), Prefetched: t.prefetched.Load(), Bytes: t.bytes.Load(), Failed: t.failed.Load()}
}

// Unwrap returns the local store.
func (t *ReadThrough) Unwrap() cas.Store { return t.Store }

// Get returns the chunk from the local store or, failing that, from a
// remote. A chunk no remote holds is an error wrapping cas.ErrNotFound; a
// chunk whose every copy is damaged one wrapping cas.ErrCorrupt. Wrong
// bytes are never returned. Under cas.LocalOnly, a chunk the local store
// lacks (or holds damaged) is cas.ErrNotLocal at once, with no remote
// asked.
func (t *ReadThrough) Get(ctx context.Context, ref cas.Ref) ([]byte, error) {
	data, err := t.Store.Get(ctx, ref)
	if err == nil {
		t.readAhead(ref)
		return data, nil
	}
	if !errors.Is(err, cas.ErrNotFound) && !errors.Is(err, cas.ErrCorrupt) {
		return nil, err
	}
	localErr := err
	t.mu.Lock()
	n := len(t.remotes)
	t.mu.Unlock()
	if n == 0 && errors.Is(err, cas.ErrCorrupt) {
		return nil, err // nowhere else to look
	}
	if n > 0 && cas.IsLocalOnly(ctx) {
		return nil, fmt.Errorf("chunk %s: %w (%v)", ref.Short(), cas.ErrNotLocal, localErr)
	}
	if errors.Is(err, cas.ErrCorrupt) {
		t.log.Warn("local chunk damaged, fetching it again from the remote", "ref", ref.Short(), "err", err)
	}
	data, err = t.fetch(ctx, ref, false)
	if err != nil {
		if errors.Is(localErr, cas.ErrCorrupt) && ctx.Err() == nil {
			// The local damage is the cause: a remote that lacks the chunk
			// too must not turn it into a plain "not found".
			return nil, fmt.Errorf("%w (no good copy on a remote either: %v)", localErr, err)
		}
		return nil, err
	}
	t.readAhead(ref)
	return data, nil
}

// GetMany implements cas.ManyGetter: the chunks the local store gives
// (verified together, as it does), and for each it fails, what Get gives.
func (t *ReadThrough) GetMany(ctx context.Context, refs []cas.Ref) ([][]byte, []error) {
	return t.GetManyInto(ctx, refs, nil)
}

// GetManyInto implements cas.IntoGetter: GetMany, with the local store's
// chunks decoded into bufs (a chunk fetched from a remote is a new slice).
func (t *ReadThrough) GetManyInto(ctx context.Context, refs []cas.Ref, bufs [][]byte) ([][]byte, []error) {
	data, errs := cas.GetManyInto(ctx, t.Store, refs, bufs)
	for i, ref := range refs {
		if errs[i] == nil {
			t.readAhead(ref)
		} else if ctx.Err() == nil {
			data[i], errs[i] = t.Get(ctx, ref)
		}
	}
	return data, errs
}

// HasMany reports a ref as present if the local store holds it or it is a
// chunk of a hinted tree: a pulled snapshot's record on the remote implies
// the remote holds all its chunks, which Get then fetches on demand.
func (t *ReadThrough) HasMany(ctx context.Context, refs []cas.Ref) ([]bool, error) {
	has, err := t.Store.HasMany(ctx, refs)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, ok := range has {
		if !ok {
			_, has[i] = t.pos[refs[i]]
		}
	}
	return has, nil
}

// fetch brings ref from the remotes, one fetch per ref at a time: a reader
// that asks for a chunk already being fetched (ahead, or by another
// reader) waits for that fetch; a fetch ahead leaves it alone. Each chunk
// is fetched once: the caller that claims a ref's slot asks the local
// store again, since a fetch that ended after the caller's own miss has
// stored it there.
func (t *ReadThrough) fetch(ctx context.Context, ref cas.Ref, ahead bool) ([]byte, error) {
	for {
		t.mu.Lock()
		if c, ok := t.inflight[ref]; ok {
			t.mu.Unlock()
			if ahead {
				return nil, nil
			}
			select {
			case <-c.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("remote: fetch %s: %w", ref.Short(), ctx.Err())
			}
			if c.abandoned && ctx.Err() == nil {
				continue // the other caller gave up; try ourselves
			}
			if c.err != nil {
				return nil, c.err
			}
			// The fetching caller has c.data: each waiter gets a copy,
			// as the slice a Get returns belongs to its caller.
			return bytes.Clone(c.data), nil
		}
		c := &fetchCall{done: make(chan struct{})}
		t.inflight[ref] = c
		remotes := t.remotes
		t.mu.Unlock()

		c.data, c.err = t.fetchClaimed(ctx, remotes, ref, ahead)
		c.abandoned = c.err != nil && ctx.Err() != nil
		t.mu.Lock()
		delete(t.inflight, ref)
		t.mu.Unlock()
		close(c.done)
		return c.data, c.err
	}
}

// fetchClaimed fetches ref for the caller that holds its in-flight slot,
// unless the local store holds it intact by now.
func (t *ReadThrough) fetchClaimed(ctx context.Context, remotes []*Remote, ref cas.Ref, ahead bool) ([]byte, error) {
	if data, err := t.Store.Get(ctx, ref); err == nil {
		return data, nil
	}
	data, err := t.fetchFrom(ctx, remotes, ref)
	if err != nil {
		return nil, err
	}
	if ahead {
		t.prefetched.Add(1)
	} else {
		t.fetched.Add(1)
	}
	t.bytes.Add(int64(len(data)))
	return data, nil
}

func (t *ReadThrough) fetchFrom(ctx context.Context, remotes []*Remote, ref cas.Ref) ([]byte, error) {
	if len(remotes) == 0 {
		return nil, fmt.Errorf("chunk %s: not in the local store, and no remote configured: %w", ref.Short(), cas.ErrNotFound)
	}
	var errs []error
	for _, r := range remotes {
		data, err := r.GetChunk(ctx, ref)
		if err == nil {
			if _, err := t.Store.Put(ctx, data); err != nil {
				// The bytes are verified; failing to cache them only costs
				// a later refetch.
				t.log.Warn("caching a fetched chunk failed", "ref", ref.Short(), "remote", r.Name(), "err", err)
			}
			return data, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	t.failed.Add(1)
	missing := true
	for _, e := range errs {
		missing = missing && errors.Is(e, cas.ErrNotFound)
	}
	switch {
	case errors.Is(err, cas.ErrCorrupt):
		t.log.Error("remote chunk damaged: refusing to serve it", "ref", ref.String(), "err", err)
	case missing:
		t.log.Error("chunk missing locally and on every remote", "ref", ref.String(), "err", err)
	default:
		t.log.Error("chunk not local, and no remote served it", "ref", ref.String(), "err", err)
	}
	return nil, fmt.Errorf("remote: chunk %s: %w", ref.Short(), err)
}

// readAhead starts background fetches of the chunks after ref in its
// hinted file that are neither local nor in flight. It never blocks: when
// every worker is busy the rest waits for the next read.
func (t *ReadThrough) readAhead(ref cas.Ref) {
	if t.opts.ReadAhead < 0 {
		return
	}
	t.mu.Lock()
	p, ok := t.pos[ref]
	if !ok || len(t.remotes) == 0 {
		t.mu.Unlock()
		return
	}
	f := t.files[p.file]
	var want []cas.Ref
	for i := int(p.index) + 1; i < len(f) && i <= int(p.index)+t.opts.ReadAhead; i++ {
		if _, busy := t.inflight[f[i]]; !busy && !f[i].IsZero() {
			want = append(want, f[i])
		}
	}
	t.mu.Unlock()
	if len(want) == 0 {
		return
	}
	has, err := t.Store.HasMany(t.bg, want)
	if err != nil {
		return
	}
	for i, r := range want {
		if has[i] {
			continue
		}
		select {
		case t.worker <- struct{}{}:
		default:
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer func() { <-t.worker }()
			// Errors are logged by fetchFrom; the reader that needs the
			// chunk will ask again and get them.
			_, _ = t.fetch(t.bg, r, true)
		}()
	}
}

// Hint walks the tree under root (fetching missing nodes) and remembers the
// chunk sequence of every file in it, for read-ahead and HasMany. It is
// O(tree) once per root; later calls with the same root return at once.
func (t *ReadThrough) Hint(ctx context.Context, root cas.Ref) error {
	t.mu.Lock()
	_, done := t.roots[root]
	t.mu.Unlock()
	if done {
		return nil
	}
	var (
		files   [][]cas.Ref
		cur     []cas.Ref
		curPath string
		nodes   = make(map[cas.Ref]struct{})
	)
	flush := func() {
		if len(cur) > 0 {
			files = append(files, cur)
		}
		cur = nil
	}
	err := manifest.WalkRefs(ctx, t, root, func(ref cas.Ref, kind manifest.RefKind, path string) error {
		if kind != manifest.Chunk {
			if _, ok := nodes[ref]; ok {
				return manifest.SkipSubtree
			}
			nodes[ref] = struct{}{}
			if kind == manifest.TreeNode {
				flush()
			}
			return nil
		}
		if path != curPath {
			flush()
			curPath = path
		}
		cur = append(cur, ref)
		return nil
	})
	flush()
	if err != nil {
		return fmt.Errorf("remote: hint %s: %w", root.Short(), err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.roots[root] = struct{}{}
	for _, f := range files {
		if len(t.pos)+len(f) > t.opts.MaxHinted {
			t.log.Warn("read-ahead hints full: later files read without read-ahead", "max", t.opts.MaxHinted)
			return nil
		}
		idx := int32(len(t.files))
		t.files = append(t.files, f)
		for i, r := range f {
			if _, ok := t.pos[r]; !ok {
				t.pos[r] = filePos{file: idx, index: int32(i)}
			}
		}
	}
	return nil
}

// Close stops the background fetches and closes the local store.
func (t *ReadThrough) Close() error {
	t.stop()
	t.wg.Wait()
	return t.Store.Close()
}

// CorruptForTest forwards to the local store when it supports it.
func (t *ReadThrough) CorruptForTest(ref cas.Ref) error {
	c, ok := t.Store.(cas.Corrupter)
	if !ok {
		return errors.New("remote: local store cannot corrupt chunks")
	}
	return c.CorruptForTest(ref)
}
