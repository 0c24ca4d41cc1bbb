package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/manifest"
)

// Journaling of changes other than writes: each operation that changes
// the tree or a node's attributes puts its records into the journal
// before it returns, under the lock that orders it against the changes
// it depends on (treeMu for names, node.mu for a file's content), so the
// journal replays them in an order they could have taken effect in.
// See doc.go, The journal.

// journaling reports whether changes go to the journal: there is one,
// and every change since the durable head is in it (metaDirty unset).
func (s *Session) journaling() bool {
	if s.journal == nil {
		return false
	}
	s.dirtyMu.Lock()
	defer s.dirtyMu.Unlock()
	return !s.metaDirty
}

// jidOf returns n's journal id, first giving it one with a bind record
// (its path now) if it has none in this incarnation of the journal; 0
// when no record can name n: journaling is off, or n has no name (and
// was not made in this incarnation). Called with treeMu held and freeze
// held shared.
func (s *Session) jidOf(n *node) uint64 {
	if !s.journaling() {
		return 0
	}
	if n == s.root {
		return rootJID
	}
	if n.jid != 0 && n.jinc == s.journal.incarnation() {
		return n.jid
	}
	path, named := s.pathOf(n)
	if !named {
		return 0
	}
	id, inc := s.journal.newID()
	if err := s.journal.write(journalRecord{kind: recBind, id: id, path: path}); err != nil {
		s.journalRefused(err)
		return 0
	}
	n.jid, n.jinc = id, inc
	return id
}

// lockedJID is jidOf for a caller that holds no tree lock.
func (s *Session) lockedJID(n *node) uint64 {
	if s.journal == nil {
		return 0
	}
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	return s.jidOf(n)
}

// journalRefused logs why the journal refused a record (a full journal
// needs no word: the next flush empties it).
func (s *Session) journalRefused(err error) {
	if !errors.Is(err, errJournalFull) {
		s.log.Warn("journal refused a record: the next flush takes the change", "session", s.name, "err", err)
	}
}

// attrRecord returns a record of n's attributes now, versioned after
// every earlier record of them. Called with n.mu held.
func (n *node) attrRecord(id uint64) journalRecord {
	n.aver++
	a := &attrSnap{mode: n.mode, uid: n.uid, gid: n.gid, atime: n.atime, mtime: n.mtime, ctime: n.ctime, btime: n.btime}
	if len(n.xattrs) > 0 {
		a.xattrs = maps.Clone(n.xattrs) // values are never changed in place
	}
	return journalRecord{kind: recAttr, id: id, ver: n.aver, attr: a}
}

// change collects the records of one operation, which the journal takes
// in one piece (all or none), and the nodes it changed.
type change struct {
	s  *Session
	ok bool // every record so far could be made
	// moot is set when the change needs no record: it changes only a
	// node no replay can reach (nodeChange).
	moot bool
	recs []journalRecord
	snap []jnode // nodes whose attributes commit records
	mark []*node // nodes commit marks changed
}

type jnode struct {
	n  *node
	id uint64
}

// nodeChange starts the records of an operation that changes n alone
// (its attributes, size, allocation or extended attributes) and returns
// n's journal id. A file with no name and no id in this incarnation (an
// unlinked file still open, such as SQLite's, or an O_TMPFILE made before
// the last reset) needs no record: a crash of the daemon drops it with
// its handles, and a link that names it again is a change the journal
// does not take (metaDirty), which the next flush stores whole. Such a
// change leaves the journal taking records. Called with no lock held.
func (s *Session) nodeChange(n *node) (*change, uint64) {
	s.treeMu.Lock()
	id := s.jidOf(n)
	unreachable := id == 0 && !n.isDir() && n.nlink == 0
	s.treeMu.Unlock()
	ch := s.newChange()
	if id == 0 {
		ch.moot = ch.ok && unreachable
		ch.ok = false
	}
	return ch, id
}

// newChange starts the records of an operation. Called with the lock
// that orders the operation held (treeMu for names).
func (s *Session) newChange() *change {
	return &change{s: s, ok: s.journaling()}
}

// id returns n's journal id (jidOf), or 0 when it has none: then the
// operation is not journaled. Called with treeMu held.
func (c *change) id(n *node) uint64 {
	if !c.ok {
		return 0
	}
	id := c.s.jidOf(n)
	c.ok = id != 0
	return id
}

// newID gives the node n, new, a journal id for its create record.
// Called with treeMu held.
func (c *change) newID(n *node) uint64 {
	if !c.ok {
		return 0
	}
	n.jid, n.jinc = c.s.journal.newID()
	return n.jid
}

func (c *change) add(r journalRecord) {
	if c.ok {
		c.recs = append(c.recs, r)
	}
}

// touch says n (journal id id) changed: commit records its attributes
// and marks it.
func (c *change) touch(n *node, id uint64) {
	c.snap = append(c.snap, jnode{n, id})
	c.mark = append(c.mark, n)
}

// held says n changed, for a caller that holds n.mu: its attributes are
// recorded now.
func (c *change) held(n *node, id uint64) {
	c.add(n.attrRecord(id))
	c.mark = append(c.mark, n)
}

// setattr commits a setattr of n (journal id id), which set its size if
// size is not nil. Called with n.mu held.
func (c *change) setattr(n *node, id uint64, size *int64) {
	if size != nil {
		c.add(journalRecord{kind: recTrunc, id: id, size: *size})
	}
	c.ok = c.ok && id != 0
	c.held(n, id)
	c.commit()
}

// commit puts the change's records into the journal and marks its nodes
// changed; where they cannot be journaled, it marks the session so that
// the journal takes no record until the next durable flush (metaDirty),
// which stores the change. Called with the operation's locks held but
// for the node locks of touched nodes.
func (c *change) commit() {
	if c.ok && !c.s.journaling() {
		c.ok = false // a change that could not be journaled came first
	}
	if c.ok {
		for _, t := range c.snap {
			t.n.mu.Lock()
			c.recs = append(c.recs, t.n.attrRecord(t.id))
			t.n.mu.Unlock()
		}
		if err := c.s.journal.write(c.recs...); err != nil {
			c.s.journalRefused(err)
			c.ok = false
		}
	}
	for _, n := range c.mark {
		c.s.markChanged(n)
	}
	if c.ok {
		c.s.flushSoon()
	}
	if !c.ok && !c.moot {
		c.s.dirtyMu.Lock()
		c.s.metaDirty = true
		c.s.dirtyMu.Unlock()
	}
}

// liveBacking puts a live record of n's backing file b (by its name in
// the backing directory) into the journal, unless one of this incarnation
// names it already: the bytes writers pass through to b, which the daemon
// never sees, then survive a crash of the daemon, as a replay takes the
// file's content from b, whole. An appender's and a staged file's get one
// when a writer opens them, and every file still live gets one at a reset
// (resetJournal). A file that cannot be so recorded (id 0: n has
// no name) sets metaDirty (see change.commit). Called with n.mu held.
func (s *Session) liveBacking(n *node, b *backing, id uint64) {
	if !s.journaling() || s.liveNow(b) {
		return
	}
	ch := &change{s: s, ok: id != 0}
	if ch.ok {
		b.jid, b.jinc = id, s.journal.incarnation()
		ch.add(journalRecord{kind: recLive, id: id, data: []byte(b.name)})
	}
	ch.commit()
}

// liveNow reports whether a live record of the journal's incarnation
// names b. Called with the node's mu held.
func (s *Session) liveNow(b *backing) bool {
	return b.jid != 0 && s.journal != nil && s.journal.incarnation() == b.jinc
}

// liveBackingFile is a backing file that needs a live record in a new
// incarnation of the journal (liveNeeded), with its node's path.
type liveBackingFile struct {
	n    *node
	b    *backing
	path string
}

// liveFiles returns the backing files that need a live record in a new
// incarnation of the journal, and their nodes' paths. Called with freeze
// held exclusively.
func (s *Session) liveFiles() []liveBackingFile {
	var out []liveBackingFile
	for _, n := range s.backed.list() {
		s.treeMu.Lock()
		path, named := s.pathOf(n)
		s.treeMu.Unlock()
		n.mu.Lock()
		if named && n.liveNeeded() {
			out = append(out, liveBackingFile{n: n, b: n.data.backing, path: path})
		}
		n.mu.Unlock()
	}
	return out
}

// liveBlock returns a bind and a live record of each file, with journal
// ids from 2 on (blockID), as the first records of an incarnation.
func liveBlock(files []liveBackingFile) []journalRecord {
	recs := make([]journalRecord, 0, 2*len(files))
	for i, f := range files {
		id := blockID(i)
		recs = append(recs, journalRecord{kind: recBind, id: id, path: f.path},
			journalRecord{kind: recLive, id: id, data: []byte(f.b.name)})
	}
	return recs
}

// blockID is the journal id liveBlock gives its i-th file.
func blockID(i int) uint64 { return uint64(rootJID + 1 + i) }

// liveNeeded reports whether n's backing file needs a live record in a
// new incarnation of the journal: the durable head may lack its content,
// as a writer still has it open or it was written since its last ingest
// (a staged file closed but not absorbed yet). Called with n.mu held.
func (n *node) liveNeeded() bool {
	b := n.data.backing
	return b != nil && (b.opens > 0 || !n.ingestedAsIs())
}

// journalNext puts a next block into the journal before the head moves
// to generation gen: a next record, then a bind and a live record (ids of
// the next incarnation) of every backing file that will need one
// (liveFiles), or none with empty set (a restore, whose tree is another).
// A crash after the head moved and before the journal's reset leaves a
// journal of the old generation, whose records the head holds, but not
// the bytes passthrough writers put into backing files a partial flush
// does not absorb (an open staged file): a replay then applies the last
// block for its head alone (forHead). The next record goes in even with
// no file, so that no block an earlier move wrote, whose commit failed,
// is taken for this one's. Called with freeze held exclusively.
func (s *Session) journalNext(gen uint64, empty bool) {
	// Not journaling(): a flush set metaDirty for the changes it stores,
	// which the next head holds; the block is for that head. Nor into a
	// journal not reset since it was opened: the flush of a load's replay,
	// whose records are still the journal's, at its start (it has no
	// size, generation or nonce of its own yet). A crash after that
	// flush's head moved finds no block for the new head, and replays
	// nothing (forHead): the head holds every record, and no writer
	// passed through since the load.
	if s.journal == nil || !s.journal.started() {
		return
	}
	var block []journalRecord
	if !empty {
		block = liveBlock(s.liveFiles())
	}
	recs := append([]journalRecord{{kind: recNext, ver: gen, size: int64(len(block))}}, block...)
	if err := s.journal.write(recs...); err != nil {
		s.journalRefused(err)
	}
}

// dropRecords journals the drop of n's backing file b, and reports
// whether b's file may serve another file (be recycled), which it may
// only if no record of this incarnation reads it after the drop:
//   - with no live record of b in this incarnation, none is needed: the
//     content is the node's, as records of it or the durable head say;
//   - a small file (under absorbHoldMin: an untarred file, most new
//     files) that no open could map, which goes back to the pool for the
//     next new file, gets a detach record followed by its content, whole,
//     so that a replay reads nothing from the file, which may hold
//     another file's bytes by then;
//   - any other gets an unlive record, at which a replay takes the
//     content from the file as it then is: it is not recycled, and its
//     name goes at the next reset.
//
// A drop the journal refuses (it is full) keeps the file too: the live
// record would lead a replay to it. Called with n.mu held.
func (s *Session) dropRecords(n *node, b *backing) bool {
	if !s.liveNow(b) {
		return b.recyclable()
	}
	if b.recyclable() && s.journaling() && s.detachWithContent(n, b) {
		return true
	}
	s.unliveBacking(n, b)
	return false
}

// detachWithContent puts a detach record of b, then b's content (a
// truncate to 0 and one write), into the journal in one piece, and
// reports whether it did. Called with n.mu held.
func (s *Session) detachWithContent(n *node, b *backing) bool {
	fp, err := fingerprintOf(b.f)
	if err != nil || fp.size >= absorbHoldMin {
		return false
	}
	data := make([]byte, fp.size)
	k, err := b.f.ReadAt(data, 0)
	if err != nil && !errors.Is(err, io.EOF) || int64(k) != fp.size {
		return false
	}
	n.aver++
	ch := &change{s: s, ok: true}
	ch.add(journalRecord{kind: recDetach, id: b.jid})
	ch.add(journalRecord{kind: recTrunc, id: b.jid})
	ch.add(journalRecord{kind: recWrite, id: b.jid, size: fp.size, mtime: n.mtime, ctime: n.ctime, ver: n.aver, data: data})
	ch.mark = append(ch.mark, n) // a flush then empties the journal
	ch.commit()
	return ch.ok
}

// unliveBacking puts an unlive record of n's backing file b, being
// dropped, into the journal, if a live record of this incarnation names
// it: a replay then takes the content from b as it is (the node holds it
// now) and applies the records after to the node. Called with n.mu held.
func (s *Session) unliveBacking(n *node, b *backing) {
	if !s.liveNow(b) || !s.journaling() {
		return
	}
	ch := &change{s: s, ok: true}
	ch.add(journalRecord{kind: recUnlive, id: b.jid})
	ch.mark = append(ch.mark, n)
	ch.commit()
}

// replayer applies a journal's records to the session they were taken
// from, in order.
type replayer struct {
	s   *Session
	ids map[uint64]*node
	// times and attrs are the versions of the attributes applied last
	// per journal id: a write record's times, and the rest of a record of
	// attributes (see applyAttr).
	times, attrs map[uint64]uint64
	// live names the backing file of each journal id with a live record
	// and no unlive record after it.
	live map[uint64]string
}

func newReplayer(s *Session) *replayer {
	return &replayer{s: s, ids: map[uint64]*node{rootJID: s.root}, times: map[uint64]uint64{}, attrs: map[uint64]uint64{},
		live: map[uint64]string{}}
}

// fromBacking makes n's content its backing file's, whole: the content
// of a live record's file, which every change to n reached while it was
// live (passthrough writes, and the daemon's own through writeThrough).
// Its mtime and ctime, where later than n's, are those of the writes the
// daemon never saw.
func (r *replayer) fromBacking(ctx context.Context, n *node, name string) error {
	f, err := r.s.openBackingName(name)
	if err != nil {
		return fmt.Errorf("backing file of a live record: %w", err)
	}
	var st unix.Stat_t
	err = unix.Fstat(int(f.Fd()), &st)
	f.Close()
	if err != nil {
		return fmt.Errorf("backing file of a live record: %w", err)
	}
	read, err := r.s.restage(ctx, n, name, maxFileSize)
	r.s.replayed.stagedBytes += read
	if err != nil {
		return err
	}
	n.mu.Lock()
	if t := st.Mtim.Nano(); t > n.mtime {
		n.mtime = t
	}
	if t := st.Ctim.Nano(); t > n.ctime {
		n.ctime = t
	}
	n.mu.Unlock()
	r.s.markDirty(n)
	return nil
}

// finish takes the content of every file still live from its backing
// file.
func (r *replayer) finish(ctx context.Context) error {
	ids := make([]uint64, 0, len(r.live))
	for id := range r.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := r.fromBacking(ctx, r.ids[id], r.live[id]); err != nil {
			return fmt.Errorf("journal id %d: %w", id, err)
		}
	}
	return nil
}

// node returns the node a record names: by path in the formats before
// HFJ4, by journal id after.
func (r *replayer) node(ctx context.Context, id uint64, path string) (*node, error) {
	if id == 0 {
		return r.s.walkFile(ctx, path)
	}
	n, ok := r.ids[id]
	if !ok {
		return nil, fmt.Errorf("journal id %d named before it was given", id)
	}
	return n, nil
}

// apply applies one record.
func (r *replayer) apply(ctx context.Context, rec *journalRecord) error {
	s := r.s
	switch rec.kind {
	case recBind:
		n, err := s.walk(ctx, rec.path)
		r.ids[rec.id] = n
		return err
	case recCreate:
		return r.create(ctx, rec)
	case recLink, recUnlink, recRename:
		return r.names(ctx, rec)
	}
	n, err := r.node(ctx, rec.id, rec.path)
	if err != nil {
		return err
	}
	switch rec.kind {
	case recWrite:
		return r.write(ctx, n, rec)
	case recStage:
		read, err := s.restage(ctx, n, string(rec.data), rec.size)
		s.replayed.stagedBytes += read
		s.markDirty(n)
		return err
	case recTrunc:
		return s.setattr(ctx, n, SetAttr{Size: &rec.size})
	case recAlloc:
		return s.allocate(ctx, n, rec.off, rec.size, rec.flags, privDrop{})
	case recAttr:
		r.applyAttr(n, rec)
	case recLive:
		r.live[rec.id] = string(rec.data)
	case recUnlive:
		name, ok := r.live[rec.id]
		if !ok {
			return fmt.Errorf("unlive record of journal id %d with no live record", rec.id)
		}
		delete(r.live, rec.id)
		return r.fromBacking(ctx, n, name)
	case recDetach:
		if _, ok := r.live[rec.id]; !ok {
			return fmt.Errorf("detach record of journal id %d with no live record", rec.id)
		}
		delete(r.live, rec.id) // the records after it give the content
	}
	return nil
}

func (r *replayer) create(ctx context.Context, rec *journalRecord) error {
	s := r.s
	var c *node
	var err error
	if rec.dir == 0 {
		c, err = s.Tmpfile(s.root, 0, Owner{}, true)
	} else {
		dir, ok := r.ids[rec.dir]
		if !ok {
			return fmt.Errorf("journal id %d named before it was given", rec.dir)
		}
		switch k := rec.nkind; {
		case k == manifest.KindFile:
			c, err = s.Create(ctx, dir, rec.name, 0, Owner{})
		case k == manifest.KindDir:
			c, err = s.Mkdir(ctx, dir, rec.name, 0, Owner{})
		case k == manifest.KindSymlink:
			c, err = s.Symlink(ctx, dir, rec.name, string(rec.data), Owner{})
		default:
			c, err = s.Mknod(ctx, dir, rec.name, k, 0, rec.rdev, Owner{})
		}
	}
	if err != nil {
		return err
	}
	r.ids[rec.id] = c
	return nil
}

// names replays a link, an unlink or a rename.
func (r *replayer) names(ctx context.Context, rec *journalRecord) error {
	s := r.s
	dir, ok := r.ids[rec.dir]
	if !ok {
		return fmt.Errorf("journal id %d named before it was given", rec.dir)
	}
	switch rec.kind {
	case recLink:
		n, err := r.node(ctx, rec.id, "")
		if err != nil {
			return err
		}
		return s.Link(ctx, dir, rec.name, n)
	case recUnlink:
		if rec.flags&1 != 0 {
			return s.Rmdir(ctx, dir, rec.name)
		}
		return s.Unlink(ctx, dir, rec.name)
	}
	dir2, ok := r.ids[rec.dir2]
	if !ok {
		return fmt.Errorf("journal id %d named before it was given", rec.dir2)
	}
	return s.Rename(ctx, dir, rec.name, dir2, rec.name2, rec.flags)
}

func (r *replayer) write(ctx context.Context, n *node, rec *journalRecord) error {
	if n.kind != manifest.KindFile {
		return fmt.Errorf("write record for a %s", n.kind)
	}
	n.mu.Lock()
	err := n.writeAt(ctx, rec.data, rec.off)
	if err == nil && rec.size > n.data.size {
		err = n.growTo(ctx, rec.size)
	}
	if rec.mtime != 0 && (rec.ver == 0 || rec.ver > r.times[rec.id]) {
		// What stat showed once the write was served.
		n.mtime, n.ctime = rec.mtime, rec.ctime
		r.times[rec.id] = rec.ver
	}
	n.mu.Unlock()
	r.s.markDirty(n)
	return err
}

// applyAttr sets n's attributes to a record's. Records of one node's
// attributes may reach the journal in another order than they were taken
// (each is taken under node.mu, written after), so each carries a
// version and only a newer one applies: its times unless a write record
// set newer ones, the rest unless a newer record of attributes did.
func (r *replayer) applyAttr(n *node, rec *journalRecord) {
	a := rec.attr
	n.mu.Lock()
	if rec.ver > r.times[rec.id] {
		n.mtime, n.ctime = a.mtime, a.ctime
		r.times[rec.id] = rec.ver
	}
	if rec.ver > r.attrs[rec.id] {
		n.mode, n.uid, n.gid = a.mode, a.uid, a.gid
		n.atime, n.btime = a.atime, a.btime
		n.xattrs = a.xattrs
		r.attrs[rec.id] = rec.ver
	}
	n.mu.Unlock()
	r.s.markDirty(n)
}

// walk finds the node at path ("" for the root).
func (s *Session) walk(ctx context.Context, path string) (*node, error) {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	return s.walkFrom(ctx, s.root, path, errNoEntry)
}

var errNoEntry = errors.New("no such file")
