package remote

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/stored"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// Phase names a step of a push or pull, for progress reports.
type Phase string

const (
	PhaseLineage Phase = "lineage" // finding the snapshots to transfer
	PhaseScan    Phase = "scan"    // walking trees, checking what is present
	PhaseChunks  Phase = "chunks"  // transferring file chunks
	PhaseNodes   Phase = "nodes"   // transferring tree and index nodes
	PhaseRecord  Phase = "record"  // writing a snapshot record
	PhaseHead    Phase = "head"    // moving the session head
	PhaseVerify  Phase = "verify"  // reading objects back and checking them
)

// Progress is reported while a push or pull runs, from one goroutine at a
// time (calls never overlap).
type Progress struct {
	Phase    Phase
	Snapshot string // the snapshot whose tree is being transferred
	// Objects and Bytes are the totals known so far; Done counts what
	// finished. Bytes are stored (compressed) sizes for a push.
	Objects, ObjectsDone int64
	Bytes, BytesDone     int64
}

// PushOptions tune a push.
type PushOptions struct {
	Progress func(Progress)
	// NoHead skips moving the session head: the snapshot (and its lineage)
	// become durable on the remote without becoming its session's latest.
	NoHead bool
	// Repair reads back, instead of asking whether it exists, every
	// record, node and chunk that the push would skip because the remote
	// has it: those of the snapshot and of its lineage as far as the
	// remote holds it. Whatever is missing or damaged is uploaded again
	// from the local store, in the order of a push.
	Repair bool
}

// PushResult says what a push did.
type PushResult struct {
	ID      string // the snapshot pushed
	Session string
	// Records is how many snapshot records were uploaded (the snapshot and
	// the part of its lineage the remote lacked).
	Records int
	// Checked counts the objects whose presence was asked; Uploaded and
	// UploadedBytes (stored form) what was sent.
	Checked       int
	Uploaded      int
	UploadedBytes int64
	// Shared counts the objects this push found absent and did not send
	// because another push through the same Remote sent them meanwhile.
	Shared int
	// Head is the session's remote head after the push (nil with NoHead).
	Head *Head
	// HeadMoved reports whether the push changed the head.
	HeadMoved bool
	// With Repair: Verified counts the objects read back intact, Missing
	// those the remote lacked (never pushed, or lost) and Damaged those
	// that did not check; every missing or damaged one was uploaded
	// (counted in Uploaded too).
	Verified, Missing, Damaged int
}

// PushSource is what Push reads: the local store and catalog.
type PushSource interface {
	cas.Getter
}

// Push makes the snapshot named by spec (see catalog.Resolve) durable on
// the remote and, unless opts.NoHead, its session's remote head. It uploads
// only what the remote lacks, in an order that keeps the remote's
// invariants at every instant (see the package doc), so a push interrupted
// anywhere can be rerun and completes. It fails with ErrConflict when the
// remote head holds a snapshot that is not an ancestor of this one (another
// host pushed a diverging turn: found before anything is uploaded) or moves
// while the push runs.
func Push(ctx context.Context, local PushSource, cat *catalog.Catalog, r *Remote, spec string, opts PushOptions) (*PushResult, error) {
	_, id, err := cat.Resolve(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("push %s: %w", spec, err)
	}
	// The push lock keeps a remote gc from deleting what this push finds
	// present and skips (see lock.go).
	l, err := r.lockPush(ctx)
	if err != nil {
		return nil, fmt.Errorf("push %s to %s: %w", spec, r.Name(), err)
	}
	defer l.release()
	since := r.uploads.join()
	defer r.uploads.leave(since)
	p := &pusher{local: local, cat: cat, r: r, opts: opts, lock: l, since: since, known: make(map[cas.Ref]struct{})}
	res, err := p.push(ctx, id)
	if err != nil {
		return res, fmt.Errorf("push %s to %s: %w", spec, r.Name(), err)
	}
	return res, nil
}

type pusher struct {
	local PushSource
	cat   *catalog.Catalog
	r     *Remote
	opts  PushOptions
	lock  *lock
	since uint64 // when it joined r.uploads
	res   PushResult
	// known holds refs the remote is known to hold (checked or uploaded),
	// nodes with everything below them.
	known map[cas.Ref]struct{}
}

func (p *pusher) report(pr Progress) {
	if p.opts.Progress != nil {
		p.opts.Progress(pr)
	}
}

func (p *pusher) push(ctx context.Context, id string) (*PushResult, error) {
	p.res.ID = id
	p.report(Progress{Phase: PhaseLineage, Snapshot: id})
	order, records, err := p.lineage(ctx, id)
	if err != nil {
		return &p.res, err
	}
	_, snap, err := p.cat.Record(ctx, id)
	if err != nil {
		return &p.res, err
	}
	p.res.Session = snap.Session
	if err := p.checkHead(ctx, snap.Session, id); err != nil {
		return &p.res, err
	}
	for _, sid := range order {
		rec := records[sid]
		if err := p.pushTree(ctx, sid, rec.snap.Root); err != nil {
			return &p.res, fmt.Errorf("snapshot %s: %w", sid, err)
		}
		if err := p.putRecord(ctx, sid, rec); err != nil {
			return &p.res, err
		}
	}
	if p.opts.NoHead {
		return &p.res, nil
	}
	p.report(Progress{Phase: PhaseHead, Snapshot: id})
	if err := p.lock.check(); err != nil {
		return &p.res, err
	}
	h, moved, err := advanceHead(ctx, p.r, p.cat, snap.Session, id)
	p.res.Head, p.res.HeadMoved = h, moved
	return &p.res, err
}

// checkHead fails with ErrConflict, before anything is uploaded, a push
// whose head move would be refused: the remote head holds a snapshot on
// another line. The If-Match of the move still catches a head that moves
// while the push runs.
func (p *pusher) checkHead(ctx context.Context, session, id string) error {
	if p.opts.NoHead {
		return nil
	}
	h, err := p.r.Head(ctx, session)
	if errors.Is(err, ErrNoSnapshot) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := headMove(ctx, p.r, p.cat, session, h, id); err != nil {
		p.res.Head = h
		return err
	}
	return nil
}

// putRecord writes a snapshot record after its tree: the durability
// barrier. The record goes after its tree and its lineage, so a record on
// the remote implies both are complete.
func (p *pusher) putRecord(ctx context.Context, sid string, rec localRecord) error {
	if rec.put == putNone {
		return nil
	}
	p.report(Progress{Phase: PhaseRecord, Snapshot: sid})
	if err := p.lock.check(); err != nil {
		return err
	}
	var err error
	if rec.put == putReplace {
		err = p.r.replaceSnapshot(ctx, sid, rec.raw)
	} else {
		err = p.r.putSnapshot(ctx, sid, rec.raw)
	}
	if err != nil {
		return fmt.Errorf("snapshot %s: record: %w", sid, err)
	}
	p.res.Records++
	p.res.Uploaded++
	p.res.UploadedBytes += int64(len(rec.raw))
	return nil
}

// recordPut says how a push writes a snapshot record.
type recordPut uint8

const (
	putNone    recordPut = iota // the remote holds it intact (a repair)
	putCreate                   // absent: create-only
	putReplace                  // damaged (a repair): overwrite
)

type localRecord struct {
	raw  []byte
	snap *manifest.Snapshot
	put  recordPut
}

// lineage returns the snapshots to push, ancestors first: id and every
// Parent/Origin ancestor up to the ones the remote already holds (which,
// by the record invariant, have their own lineage there too). A repair
// goes on through those, as far as the remote holds them (a forget ends
// the line, as for gc), to read back their trees.
func (p *pusher) lineage(ctx context.Context, id string) ([]string, map[string]localRecord, error) {
	var order []string
	records := make(map[string]localRecord)
	visited := make(map[string]bool)
	var visit func(id string, onRemote bool) error
	visit = func(id string, onRemote bool) error {
		if id == "" || visited[id] {
			return nil
		}
		visited[id] = true
		put, skip, err := p.recordState(ctx, id, onRemote)
		if err != nil || skip {
			return err
		}
		raw, snap, err := p.cat.Record(ctx, id)
		if err != nil {
			return err
		}
		below := onRemote || put != putCreate
		if err := visit(snap.Parent, below); err != nil {
			return err
		}
		if snap.Origin != nil {
			if err := visit(snap.Origin.Snapshot, below); err != nil {
				return err
			}
		}
		records[id] = localRecord{raw: raw, snap: snap, put: put}
		order = append(order, id)
		return nil
	}
	return order, records, visit(id, false)
}

// recordState says how to write the record of id, or to skip it and its
// lineage: a push skips a record the remote has; a repair reads it back,
// and skips one that is absent below a record the remote has (forgotten).
// onRemote says whether a descendant's record is on the remote.
func (p *pusher) recordState(ctx context.Context, id string, onRemote bool) (recordPut, bool, error) {
	p.res.Checked++
	if !p.opts.Repair {
		has, err := p.r.HasSnapshot(ctx, id)
		return putCreate, has, err
	}
	_, _, err := p.r.Snapshot(ctx, id)
	switch {
	case err == nil:
		p.res.Verified++
		return putNone, false, nil
	case errors.Is(err, ErrNoSnapshot) && onRemote:
		return putNone, true, nil
	case errors.Is(err, ErrNoSnapshot):
		p.res.Missing++
		return putCreate, false, nil
	case errors.Is(err, cas.ErrCorrupt):
		p.res.Damaged++
		p.r.log.Warn("remote record damaged, uploading it again", "remote", p.r.cfg.Name, "key", p.r.recordKey(id), "err", err)
		return putReplace, false, nil
	}
	return putNone, false, err
}

// pending is a node the remote lacks (upload), with the nodes below it
// that it lacks too (they must be uploaded first). A repair also scans
// nodes it read back intact, to reach what lies below them; those are
// pending without upload, and their children count for heights.
type pending struct {
	kind     manifest.RefKind
	children []cas.Ref
	upload   bool
}

// edge is a reference from a node to a tree or index node below it.
type edge struct {
	parent, ref cas.Ref
	kind        manifest.RefKind
}

// treeScan is what the scan of one tree found: the nodes and chunks the
// remote lacks, and every ref met so far.
type treeScan struct {
	nodes  map[cas.Ref]*pending
	chunks map[cas.Ref]struct{}
	seen   map[cas.Ref]struct{}
}

// meet reports whether ref is met for the first time in this tree.
func (sc *treeScan) meet(ref cas.Ref) bool {
	if _, ok := sc.seen[ref]; ok {
		return false
	}
	sc.seen[ref] = struct{}{}
	return true
}

// link records every edge to an absent node, also to one first reached
// through another parent: heights must see all of them.
func (sc *treeScan) link(kids []edge) {
	for _, k := range kids {
		if n, ok := sc.nodes[k.ref]; ok {
			if n.kind == 0 {
				n.kind = k.kind
			}
			parent := sc.nodes[k.parent]
			parent.children = append(parent.children, k.ref)
		}
	}
}

func (p *pusher) isKnown(ref cas.Ref) bool {
	_, ok := p.known[ref]
	return ok
}

// pushTree uploads every object of the tree under root that the remote
// lacks: a breadth-first scan that asks about each level's nodes and
// chunks in batches and descends only into absent nodes (a repair: into
// every node), then the chunks, then the nodes in order of height, so
// that no node lands before everything below it.
func (p *pusher) pushTree(ctx context.Context, sid string, root cas.Ref) error {
	if p.isKnown(root) {
		return nil
	}
	has, err := p.presence(ctx, []cas.Ref{root})
	p.res.Checked++
	if err != nil {
		return err
	}
	if has[0] && !p.opts.Repair {
		p.known[root] = struct{}{}
		return nil
	}
	sc, err := p.scan(ctx, sid, root, !has[0])
	if err != nil {
		return err
	}
	if err := p.upload(ctx, sid, PhaseChunks, sortedRefs(sc.chunks)); err != nil {
		return err
	}
	if err := p.uploadNodes(ctx, sid, sc.nodes); err != nil {
		return err
	}
	// The whole tree is on the remote now (a repair's intact nodes too).
	for ref := range sc.nodes {
		p.known[ref] = struct{}{}
	}
	return nil
}

// presence reports which refs the remote holds; a repair reads each back
// and counts it intact only if it checks.
func (p *pusher) presence(ctx context.Context, refs []cas.Ref) ([]bool, error) {
	if !p.opts.Repair {
		return p.r.present(ctx, refs)
	}
	got, err := p.r.readBackAll(ctx, refs, nil)
	if err != nil {
		return nil, err
	}
	has := make([]bool, len(refs))
	for i, g := range got {
		switch {
		case g.bad == nil:
			has[i] = true
			p.res.Verified++
		case errors.Is(g.bad, cas.ErrNotFound):
			p.res.Missing++
		default:
			p.res.Damaged++
			p.r.log.Warn("remote object damaged, uploading it again", "remote", p.r.cfg.Name, "key", p.r.chunkKey(refs[i]), "err", g.bad)
		}
	}
	return has, nil
}

// scan walks the tree under root level by level and returns what the
// remote lacks. upload says whether the root is absent (a repair scans an
// intact root too).
func (p *pusher) scan(ctx context.Context, sid string, root cas.Ref, upload bool) (*treeScan, error) {
	sc := &treeScan{
		nodes:  map[cas.Ref]*pending{root: {kind: manifest.TreeNode, upload: upload}},
		chunks: make(map[cas.Ref]struct{}),
		seen:   map[cas.Ref]struct{}{root: {}},
	}
	frontier := []cas.Ref{root}
	for len(frontier) > 0 {
		p.report(Progress{Phase: PhaseScan, Snapshot: sid, Objects: int64(len(sc.nodes) + len(sc.chunks))})
		kids, chunks, err := p.readLevel(ctx, sc, frontier)
		if err != nil {
			return nil, err
		}
		if frontier, err = p.askLevel(ctx, sc, kids, chunks); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

// readLevel reads the frontier's nodes from the local store. It returns
// the edges to the nodes below them, and the chunks they name that this
// tree had not met and the remote is not known to hold.
func (p *pusher) readLevel(ctx context.Context, sc *treeScan, frontier []cas.Ref) ([]edge, []cas.Ref, error) {
	var (
		kids   []edge
		chunks []cas.Ref
	)
	for _, ref := range frontier {
		kind := sc.nodes[ref].kind
		data, err := p.local.Get(ctx, ref)
		if err != nil {
			return nil, nil, fmt.Errorf("%s node %s: %w", kind, ref.Short(), err)
		}
		err = nodeRefs(kind, data, func(c cas.Ref, k manifest.RefKind) {
			switch {
			case k != manifest.Chunk:
				kids = append(kids, edge{ref, c, k})
			case sc.meet(c) && !p.isKnown(c):
				chunks = append(chunks, c)
			}
		})
		if err != nil {
			return nil, nil, fmt.Errorf("%s node %s: %w", kind, ref.Short(), err)
		}
	}
	return kids, chunks, nil
}

// askLevel asks the remote about a level's new nodes and chunks in one
// batch, records the absent ones and returns the absent nodes: the next
// level.
func (p *pusher) askLevel(ctx context.Context, sc *treeScan, kids []edge, chunks []cas.Ref) ([]cas.Ref, error) {
	var ask []cas.Ref
	for _, k := range kids {
		if sc.meet(k.ref) && !p.isKnown(k.ref) {
			ask = append(ask, k.ref)
		}
	}
	nodeAsk := len(ask)
	ask = append(ask, chunks...)
	has, err := p.presence(ctx, ask)
	p.res.Checked += len(ask)
	if err != nil {
		return nil, err
	}
	var next []cas.Ref
	for i, ref := range ask {
		switch {
		case i < nodeAsk && (!has[i] || p.opts.Repair):
			next = append(next, ref)
			sc.nodes[ref] = &pending{upload: !has[i]}
		case has[i]:
			p.known[ref] = struct{}{}
		default:
			sc.chunks[ref] = struct{}{}
		}
	}
	sc.link(kids)
	return next, nil
}

// uploadNodes uploads the nodes to upload by height: a node of height h
// has only pending children of height < h, all uploaded in earlier rounds.
func (p *pusher) uploadNodes(ctx context.Context, sid string, nodes map[cas.Ref]*pending) error {
	for _, round := range byHeight(nodes) {
		if err := p.upload(ctx, sid, PhaseNodes, sortedRefs(round)); err != nil {
			return err
		}
	}
	return nil
}

// byHeight groups the nodes to upload by height: 0 for a node with no
// pending child, else one more than its highest pending child.
func byHeight(nodes map[cas.Ref]*pending) []map[cas.Ref]struct{} {
	height := make(map[cas.Ref]int, len(nodes))
	var heightOf func(cas.Ref) int
	heightOf = func(ref cas.Ref) int {
		if h, ok := height[ref]; ok {
			return h
		}
		h := 0
		for _, c := range nodes[ref].children {
			h = max(h, heightOf(c)+1)
		}
		height[ref] = h
		return h
	}
	var rounds []map[cas.Ref]struct{}
	for ref := range nodes {
		h := heightOf(ref)
		if !nodes[ref].upload {
			continue
		}
		for len(rounds) <= h {
			rounds = append(rounds, make(map[cas.Ref]struct{}))
		}
		rounds[h][ref] = struct{}{}
	}
	return rounds
}

// upload sends refs from the local store, Parallel at a time. A ref that
// another push through the same Remote is sending, or sent since this one
// took its lock, is not sent twice (uploads.go).
func (p *pusher) upload(ctx context.Context, sid string, phase Phase, refs []cas.Ref) error {
	if len(refs) == 0 {
		return nil
	}
	var done, sent, bytes atomic.Int64
	progress := make(chan struct{}, 1)
	p.report(Progress{Phase: phase, Snapshot: sid, Objects: int64(len(refs))})
	err := parallel(ctx, p.r.parallel, len(refs), func(ctx context.Context, i int) error {
		ok, err := p.r.uploads.put(ctx, p.since, p.lock, refs[i], func(ctx context.Context) error {
			n, err := p.send(ctx, refs[i])
			bytes.Add(n)
			return err
		})
		if err != nil {
			return err
		}
		if ok {
			sent.Add(1)
		}
		done.Add(1)
		// Report from whichever worker gets the token, never two at once.
		select {
		case progress <- struct{}{}:
			p.report(Progress{Phase: phase, Snapshot: sid, Objects: int64(len(refs)), ObjectsDone: done.Load(), BytesDone: bytes.Load()})
			<-progress
		default:
		}
		return nil
	})
	p.res.Uploaded += int(sent.Load())
	p.res.Shared += int(done.Load() - sent.Load())
	p.res.UploadedBytes += bytes.Load()
	if err != nil {
		return err
	}
	for _, ref := range refs {
		p.known[ref] = struct{}{}
	}
	return nil
}

// send uploads ref from the local store and returns its stored size.
func (p *pusher) send(ctx context.Context, ref cas.Ref) (int64, error) {
	data, err := p.local.Get(ctx, ref)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", ref.Short(), err)
	}
	form, err := stored.Encode(data)
	if err != nil {
		return 0, err
	}
	if err := p.r.PutChunk(ctx, ref, form); err != nil {
		return 0, err
	}
	return int64(len(form)), nil
}

// advanceHead moves session's remote head to id if it is absent or holds an
// ancestor of id; it leaves a head that already holds id, or a descendant
// of it, alone. Anything else is ErrConflict: the remote moved on along
// another line.
func advanceHead(ctx context.Context, r *Remote, cat *catalog.Catalog, session, id string) (*Head, bool, error) {
	cur, err := r.Head(ctx, session)
	if errors.Is(err, ErrNoSnapshot) {
		h, err := r.SetHead(ctx, session, id, nil)
		if err != nil {
			return nil, false, fmt.Errorf("create head of %s: %w", session, err)
		}
		return h, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	move, err := headMove(ctx, r, cat, session, cur, id)
	if err != nil || !move {
		return cur, false, err
	}
	h, err := r.SetHead(ctx, session, id, cur)
	if err != nil {
		return cur, false, fmt.Errorf("move head of %s from %s to %s: %w", session, cur.Snapshot[:12], id[:12], err)
	}
	return h, true, nil
}

// headMove says whether a push of id moves the head cur of session: yes
// when cur holds an ancestor of id, no when it holds id or a descendant of
// it. Anything else is ErrConflict: the remote moved on along another
// line.
func headMove(ctx context.Context, r *Remote, cat *catalog.Catalog, session string, cur *Head, id string) (bool, error) {
	if cur.Snapshot == id {
		return false, nil
	}
	ancestors, err := lineageSet(ctx, cat, id)
	if err != nil {
		return false, err
	}
	if ancestors[cur.Snapshot] {
		return true, nil
	}
	if later, err := lineageSet(ctx, cat, cur.Snapshot); err == nil && later[id] {
		return false, nil // pushing an older snapshot: the head stays
	}
	return false, fmt.Errorf("head of %s on %s is at snapshot %s, which is not an ancestor of %s (another host pushed a different turn; pull it and fork, or push under another session name): %w",
		session, r.Name(), cur.Snapshot[:12], id[:12], ErrConflict)
}

// lineageSet returns id and its ancestors along Parent and Origin, as far
// as the local catalog knows them.
func lineageSet(ctx context.Context, cat *catalog.Catalog, id string) (map[string]bool, error) {
	set := make(map[string]bool)
	queue := []string{id}
	for len(queue) > 0 {
		next := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if next == "" || set[next] {
			continue
		}
		set[next] = true
		_, snap, err := cat.Record(ctx, next)
		if errors.Is(err, cas.ErrNotFound) {
			continue // not known here: the line ends for this host
		}
		if err != nil {
			return nil, err
		}
		queue = append(queue, snap.Parent)
		if snap.Origin != nil {
			queue = append(queue, snap.Origin.Snapshot)
		}
	}
	return set, nil
}
