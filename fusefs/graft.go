package fusefs

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// Root returns the session's current root, durably flushed first when the
// session is live, so that it holds every write made before the call.
func (e *Engine) Root(ctx context.Context, session string) (cas.Ref, error) {
	e.mu.Lock()
	s, live := e.sessions[session]
	e.mu.Unlock()
	if !live {
		h, err := e.cat.Head(ctx, session)
		if err != nil {
			return cas.Ref{}, err
		}
		return h.Root, nil
	}
	s.freeze.Lock()
	defer s.freeze.Unlock()
	if err := e.syncLocked(ctx, s, true); err != nil {
		return cas.Ref{}, err
	}
	return s.synced, nil
}

// Graft places a copy of entry at path in session by reference (its chunks
// or tree are shared, no byte is copied), replacing whatever is there and
// creating missing parent directories (mode 0755). check, when set, sees
// the current entry (nil when absent) under the session's lock and may
// veto the change by returning an error. The change is durable when Graft
// returns, and mounts see it at once.
func (e *Engine) Graft(ctx context.Context, session, path string, entry *manifest.Entry, check func(cur *manifest.Entry) error) error {
	if entry == nil {
		return fmt.Errorf("graft %s: %w", path, syscall.EINVAL)
	}
	ent := *entry
	ent.LinkID, ent.Nlink = 0, 0 // a hard-link identity means nothing in another session
	return e.edit(ctx, session, path, true, func(s *Session, dir *node, name string, cur *manifest.Entry) error {
		if check != nil {
			if err := check(cur); err != nil {
				return err
			}
		}
		ent.Name = name
		if err := ent.Validate(); err != nil {
			return err
		}
		if cur != nil {
			s.detach(dir, name)
			if cur.Kind == manifest.KindDir {
				s.forgetKept() // the files below keep their nlink
			}
		}
		n := s.nodeFromEntry(&ent)
		s.attach(dir, name, n, true)
		s.markDirty(n)
		return nil
	})
}

// Remove deletes path (a file, symlink or whole directory) from session,
// durably. Removing a missing path is not an error.
func (e *Engine) Remove(ctx context.Context, session, path string) error {
	return e.edit(ctx, session, path, false, func(s *Session, dir *node, name string, cur *manifest.Entry) error {
		if cur != nil {
			s.detach(dir, name)
			if cur.Kind == manifest.KindDir {
				s.forgetKept() // the files below keep their nlink
			}
		}
		return nil
	})
}

// edit runs fn on the parent directory of path in the live session, with
// every writer held off, then flushes durably and invalidates the kernel's
// view of the name in every mount.
func (e *Engine) edit(ctx context.Context, session, path string, create bool, fn func(s *Session, dir *node, name string, cur *manifest.Entry) error) error {
	if err := manifest.ValidatePath(path); err != nil {
		return err
	}
	s, err := e.live(ctx, session)
	if err != nil {
		return err
	}
	parts := strings.Split(path, "/")
	name := parts[len(parts)-1]

	s.freeze.Lock()
	err = func() error {
		defer s.freeze.Unlock()
		// Flush first so the current entry reflects every write.
		if _, err := s.flushLocked(ctx, false, true); err != nil {
			return err
		}
		s.treeMu.Lock()
		dir, err := s.walkDirs(ctx, parts[:len(parts)-1], create)
		if err != nil {
			s.treeMu.Unlock()
			if !create && err == syscall.ENOENT {
				return nil
			}
			return fmt.Errorf("%s: %w", path, err)
		}
		var cur *manifest.Entry
		if c, ok := dir.children[name]; ok {
			cur = &manifest.Entry{}
			if c.isDir() {
				cur.Tree = c.tree
			}
			c.entry(name, cur)
		}
		err = fn(s, dir, name, cur)
		if err == nil {
			s.touchDir(dir, now())
		}
		s.treeMu.Unlock()
		if err != nil {
			return err
		}
		return e.syncLocked(ctx, s, true)
	}()
	if err != nil {
		return fmt.Errorf("edit %s in %s: %w", path, session, err)
	}
	e.invalidate(s, parts)
	return nil
}

// walkDirs resolves (and with create, makes) the directories of parts.
// Called with treeMu held and freeze held exclusively.
func (s *Session) walkDirs(ctx context.Context, parts []string, create bool) (*node, error) {
	dir := s.root
	for _, p := range parts {
		if err := s.load(ctx, dir); err != nil {
			return nil, err
		}
		c, ok := dir.children[p]
		switch {
		case ok && c.isDir():
		case ok:
			return nil, syscall.ENOTDIR
		case !create:
			return nil, syscall.ENOENT
		default:
			t := now()
			dir.mu.Lock()
			uid, gid := dir.uid, dir.gid
			dir.mu.Unlock()
			c = &node{ino: s.newIno(), kind: manifest.KindDir, sess: s, mode: 0o755, uid: uid, gid: gid,
				mtime: t, ctime: t, atime: t, btime: t, tree: manifest.EmptyTreeRef(), children: make(map[string]*node)}
			s.attach(dir, p, c, true)
			s.touchDir(dir, t)
			s.markDirty(c)
		}
		dir = c
	}
	if err := s.load(ctx, dir); err != nil {
		return nil, err
	}
	return dir, nil
}

// invalidate tells the kernel that the entry at the session path parts
// changed, in every mount showing it.
func (e *Engine) invalidate(s *Session, parts []string) {
	e.mu.Lock()
	var mounts []*Mount
	for _, m := range e.mounts {
		if m.sess == s {
			mounts = append(mounts, m)
		}
	}
	e.mu.Unlock()
	for _, m := range mounts {
		rel := parts
		if m.subtree != "" {
			sub := strings.Split(m.subtree, "/")
			if len(rel) <= len(sub) || strings.Join(rel[:len(sub)], "/") != m.subtree {
				continue
			}
			rel = rel[len(sub):]
		}
		// Invalidate the first name the kernel may hold: the entry itself,
		// or the first directory on its path that it knows nothing below.
		var dir *fs.Inode = &m.root.Inode
		i := 0
		for ; i < len(rel)-1; i++ {
			c := dir.GetChild(rel[i])
			if c == nil {
				break
			}
			dir = c
		}
		dir.NotifyEntry(rel[i])
		dir.NotifyContent(0, 0) // its cached listing
	}
}

// SetHandle records the provider session handle h in session's head.
func (e *Engine) SetHandle(ctx context.Context, session, provider string, h manifest.Handle) error {
	handles := map[string]manifest.Handle{provider: h}
	_, err := e.changeHead(ctx, session, func() (*catalog.Head, error) { return e.cat.SetHandles(ctx, session, handles) })
	return err
}

// SetLayout records layout as session's layout.
func (e *Engine) SetLayout(ctx context.Context, session string, layout *manifest.Layout) (*catalog.Head, error) {
	return e.changeHead(ctx, session, func() (*catalog.Head, error) { return e.cat.SetLayout(ctx, session, layout) })
}

// changeHead runs change, which moves session's head, in step with the
// live session if there is one (whose flushes expect the head's
// generation).
func (e *Engine) changeHead(ctx context.Context, session string, change func() (*catalog.Head, error)) (*catalog.Head, error) {
	e.mu.Lock()
	s, live := e.sessions[session]
	e.mu.Unlock()
	if !live {
		return change()
	}
	s.freeze.Lock()
	defer s.freeze.Unlock()
	// Moving the head makes the journal stale: make everything durable in
	// the head first, so that nothing the journal held is lost.
	if err := e.syncLocked(ctx, s, true); err != nil {
		return nil, err
	}
	s.journalNext(s.gen+1, false) // the tree stays as it is
	head, err := change()
	if err != nil {
		return nil, err
	}
	return head, s.durableAt(head.Gen, s.synced)
}
