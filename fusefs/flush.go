package fusefs

import (
	"context"
	"fmt"
	"sort"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// batchPutter lets manifest helpers put into a batch.
type batchPutter struct{ b cas.Batch }

func (p batchPutter) Put(_ context.Context, data []byte) (cas.Ref, error) { return p.b.Put(data) }

// flushLocked stores every change since the last flush and returns the new
// root. Its cost is the changed chunks plus the directories on the paths
// from changed entries to the root, never the size of the tree. The caller
// holds s.freeze exclusively, so the result is one point in time. With all
// unset, staged files still open and not fsynced keep the content they
// were last absorbed with (staged.go): such a flush serves durability, not
// a snapshot.
func (s *Session) flushLocked(ctx context.Context, durable, all bool) (cas.Ref, error) {
	// What passthrough writers appended is part of this point in time.
	if err := s.ingestAll(ctx, all); err != nil {
		return cas.Ref{}, err
	}
	s.dirtyMu.Lock()
	dirty := s.dirty
	s.dirty = make(map[*node]struct{})
	for n := range s.atimes {
		dirty[n] = struct{}{}
	}
	clear(s.atimes)
	s.dirtyMu.Unlock()
	if len(dirty) == 0 {
		if durable {
			if err := s.store.Sync(ctx); err != nil {
				return cas.Ref{}, fmt.Errorf("sync store: %w", err)
			}
		}
		return s.flushed, nil
	}
	// Until the head holding this flush is durable (durableAt), the next
	// fsync must flush too: the spans stored here leave the journal's view.
	s.dirtyMu.Lock()
	s.metaDirty = true
	s.dirtyMu.Unlock()
	root, err := s.storeChanges(ctx, dirty, durable)
	if err != nil {
		// Nothing was lost: put the changes back for the next attempt.
		s.dirtyMu.Lock()
		for n := range dirty {
			s.dirty[n] = struct{}{}
		}
		s.dirtyMu.Unlock()
		return cas.Ref{}, err
	}
	s.flushed = root
	return root, nil
}

func (s *Session) storeChanges(ctx context.Context, dirty map[*node]struct{}, durable bool) (cas.Ref, error) {
	batch := s.newBatch()
	defer batch.Discard()
	// Chunks of batches that failed to commit are named by the tree stored
	// here: store them with it.
	settled, err := s.orphans.settle(batch)
	if err != nil {
		return cas.Ref{}, fmt.Errorf("store chunks of an earlier failed commit: %w", err)
	}
	s.treeMu.Lock()
	defer s.treeMu.Unlock()

	stale := make(map[*node]bool)
	markUp := func(d *node) {
		for ; d != nil && !stale[d]; d = d.parent {
			stale[d] = true
		}
	}
	for n := range dirty {
		if n.kind == manifest.KindFile && n.nlink == 0 && !s.open.has(n) {
			// Removed and closed: nothing can read its buffers, and storing
			// them would only spend space, which a full disk lacks (the
			// removal of a file being written could never be flushed).
			n.dropBuffers()
			continue
		}
		if n.kind == manifest.KindFile {
			if err := s.storeFileContent(ctx, batch, n); err != nil {
				return cas.Ref{}, err
			}
		}
		if !n.isDir() && n.nlink > 1 && countNames(n) < int(n.nlink) {
			// Some names of this hard-linked node live in directories not
			// loaded yet; their entries must change too.
			if err := s.loadAll(ctx, s.root); err != nil {
				return cas.Ref{}, err
			}
		}
		if n.isDir() {
			markUp(n)
			continue
		}
		for p := range n.parents {
			markUp(p)
		}
	}
	root, err := s.storeDir(ctx, batch, s.root, stale)
	if err != nil {
		return cas.Ref{}, err
	}
	if err := batch.Commit(ctx, durable); err != nil {
		return cas.Ref{}, fmt.Errorf("commit flush: %w", err)
	}
	settled()
	return root, nil
}

// dropBuffers forgets n's write buffers. For a file nothing can reach.
func (n *node) dropBuffers() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, c := range n.data.dirty {
		n.charge(c, -c.cost())
		delete(n.data.dirty, i)
	}
}

func countNames(n *node) int {
	k := 0
	for _, c := range n.parents {
		k += c
	}
	return k
}

// storeFileContent moves n's dirty chunks into the batch and records the
// resulting chunk list in n.data.base.
func (s *Session) storeFileContent(ctx context.Context, batch cas.Batch, n *node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.data
	d.unjournaled = nil // stored now; durable with the head (see durableAt)
	if len(d.dirty) == 0 && d.chunks == nil && d.size == d.base.Size {
		return nil
	}
	if err := n.spill(ctx, batch, -1, true); err != nil {
		return fmt.Errorf("store content of inode %d: %w", n.ino, err)
	}
	if err := n.loadChunks(ctx); err != nil {
		return err
	}
	if want := manifest.ChunkCount(d.size); d.chunks.Len() > want {
		d.chunks.Truncate(want)
	} else if d.chunks.Len() < want {
		d.chunks.Set(want-1, cas.Ref{}) // the grown tail reads as zeros: holes
	}
	chunks, index, depth, err := d.chunks.Store(ctx, batchPutter{batch})
	if err != nil {
		return fmt.Errorf("store chunk list of inode %d: %w", n.ino, err)
	}
	d.base = manifest.Entry{Kind: manifest.KindFile, Size: d.size, Chunks: chunks, Index: index, Depth: depth}
	return nil
}

// loadAll loads every directory below dir. Called with treeMu held.
func (s *Session) loadAll(ctx context.Context, dir *node) error {
	if err := s.load(ctx, dir); err != nil {
		return err
	}
	for _, c := range dir.children {
		if c.isDir() {
			if err := s.loadAll(ctx, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// storeDir returns dir's tree ref, re-encoding it (and its stale
// subdirectories) when it is stale. Called with treeMu held.
func (s *Session) storeDir(ctx context.Context, batch cas.Batch, dir *node, stale map[*node]bool) (cas.Ref, error) {
	if !stale[dir] || dir.children == nil {
		return dir.tree, nil
	}
	names := make([]string, 0, len(dir.children))
	for name := range dir.children {
		names = append(names, name)
	}
	sort.Strings(names)
	t := &manifest.Tree{Entries: make([]manifest.Entry, len(names))}
	for i, name := range names {
		c := dir.children[name]
		e := &t.Entries[i]
		if c.isDir() {
			ref, err := s.storeDir(ctx, batch, c, stale)
			if err != nil {
				return cas.Ref{}, err
			}
			e.Tree = ref
		}
		c.entry(name, e)
	}
	if dir == s.root {
		// No entry holds the root's attributes: its own tree does.
		var e manifest.Entry
		dir.entry("", &e)
		t.Self = &manifest.DirAttr{Mode: e.Mode, UID: e.UID, GID: e.GID, MtimeNs: e.MtimeNs, CtimeNs: e.CtimeNs, AtimeNs: e.AtimeNs, BtimeNs: e.BtimeNs, Xattrs: e.Xattrs}
	}
	ref, err := manifest.PutTree(ctx, batchPutter{batch}, t)
	if err != nil {
		return cas.Ref{}, fmt.Errorf("store directory (inode %d): %w", dir.ino, err)
	}
	dir.tree = ref
	return ref, nil
}

// entry fills e (whose Tree is already set for a directory) from n.
// Called with treeMu held.
func (n *node) entry(name string, e *manifest.Entry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e.Name = name
	e.Kind = n.kind
	e.Mode = n.mode
	e.UID = n.uid
	e.GID = n.gid
	e.MtimeNs = n.mtime
	e.CtimeNs = n.ctime
	e.BtimeNs = n.btime
	if n.atime != n.mtime {
		// Recorded only where it says more than the mtime: a tree whose
		// atimes all equal their mtimes keeps its older encoding.
		e.AtimeNs = n.atime
	}
	if len(n.xattrs) > 0 {
		e.Xattrs = make([]manifest.Xattr, 0, len(n.xattrs))
		for k, v := range n.xattrs {
			e.Xattrs = append(e.Xattrs, manifest.Xattr{Name: k, Value: v})
		}
		sort.Slice(e.Xattrs, func(i, j int) bool { return e.Xattrs[i].Name < e.Xattrs[j].Name })
	}
	switch n.kind {
	case manifest.KindSymlink:
		e.Target = n.target
		e.Size = int64(len(n.target))
	case manifest.KindCharDev, manifest.KindBlockDev:
		e.Rdev = n.rdev
	case manifest.KindFile:
		b := &n.data.base
		e.Size = b.Size
		e.Chunks = b.Chunks
		e.Index = b.Index
		e.Depth = b.Depth
	}
	if !n.isDir() && n.nlink > 1 {
		if n.linkID == 0 {
			n.linkID = newLinkID()
			n.sess.links[n.linkID] = n
		}
		e.LinkID = n.linkID
		e.Nlink = n.nlink
	}
}
