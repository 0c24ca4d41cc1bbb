package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// TestRecoveryReadsStagedFileOnce: a staged file (a new file opened
// O_WRONLY|O_CREAT|O_TRUNC) fsynced 2,000 times as it grows leaves 2,000 stage records; after a
// kill -9 the new daemon reads the staging file once, not once per record
// (which read 1 GB here, and 146 GB for a 25 MB file fsynced 11,525
// times), and every fsynced byte is back. It counts the bytes, never the
// time.
func TestRecoveryReadsStagedFileOnce(t *testing.T) {
	t.Parallel()
	needStaging(t)
	d := startDurable(t)
	const fsyncs, step = 2000, 512
	want := randBytes(51, fsyncs*step)
	// As the shell's `cmd > out.log`: a new file opened write-only is
	// staged.
	f, err := os.OpenFile(filepath.Join(d.mnt, "out.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	for i := range fsyncs {
		_, err := f.Write(want[i*step : (i+1)*step])
		require.NoError(t, err)
		require.NoError(t, f.Sync())
	}
	_, err = f.Write([]byte("not synced"))
	require.NoError(t, err)
	d.kill(t)
	_ = f.Close() // its mount is gone: ENOTCONN

	jf, err := os.Open(journalPath(d.storeDir, "d"))
	require.NoError(t, err)
	_, recs, err := readJournal(jf)
	jf.Close()
	require.NoError(t, err)
	stages, lives := 0, 0
	for _, r := range recs {
		switch r.kind {
		case recStage:
			stages++
		case recLive:
			lives++
		}
	}
	t.Logf("journal: %d records, %d stage records", len(recs), stages)
	require.GreaterOrEqual(t, stages, fsyncs-1, "the fsyncs went through stage records")

	m := d.remount(t)
	got := []byte(read(t, filepath.Join(m.Dir(), "out.log")))
	require.True(t, isPrefix(want, got), "every fsynced byte is back (%d bytes, want at least %d)", len(got), len(want))
	require.True(t, len(got) == len(want) || string(got[len(want):]) == "not synced", "the rest is whole or absent")
	r := m.sess.replayed
	t.Logf("replay: %d records, %d applied, %d staged bytes read for a %d-byte file", r.records, r.applied, r.stagedBytes, len(got))
	require.Equal(t, len(recs), r.records)
	// The file is still open, so its live record stands: its staging
	// file gives the content, whole, and no stage record is applied.
	require.Equal(t, 1, lives, "the open's live record")
	require.Equal(t, len(recs)-stages, r.applied, "no stage record is replayed (the file's create and live record are)")
	require.LessOrEqual(t, r.stagedBytes, int64(len(want)+len("not synced")), "the staging file is read once")
}

// TestReplayFoldsPerFile: the fold keeps the outcome of an in-order
// replay: a write record after a file's last stage record still applies,
// one before it is superseded, and other files' records are untouched.
func TestReplayFoldsPerFile(t *testing.T) {
	t.Parallel()
	r := newReplayFixture(t, "a", "b")
	r.stage("a", "stage-a1", []byte("first staged content"))
	r.write("a", 0, []byte("XX"), 20) // superseded by the next stage record
	r.write("b", 0, []byte("bbbb"), 4)
	r.stage("a", "stage-a2", []byte("second, longer staged content"))
	r.write("a", 0, []byte("S"), 29)
	r.write("b", 4, []byte("!"), 5)
	s := r.replay()
	require.Equal(t, "Second, longer staged content", r.content(s, "a"))
	require.Equal(t, "bbbb!", r.content(s, "b"))
	require.Equal(t, 8, s.replayed.records, "two binds, six records")
	require.Equal(t, 6, s.replayed.applied, "two binds, four records")
	require.EqualValues(t, len("second, longer staged content"), s.replayed.stagedBytes)

	// A hard link is the same file under another path: a write through
	// it before the other name's stage record is superseded too.
	r = newReplayFixture(t, "a", "link")
	r.write("link", 0, []byte("old write"), 9)
	r.stage("a", "stage-a", []byte("staged"))
	s = r.replay()
	require.Equal(t, "staged", r.content(s, "link"))
	require.Equal(t, 2, s.replayed.applied, "the bind and the stage record")
}

// TestReplayDetachedFile: a backing file recycled for another file after
// its detach record is never read for the first file, whose content the
// records after the detach give; a file still live at the end takes the
// backing file's content, whole, and one dropped with an unlive record
// takes it as it is then.
func TestReplayDetachedFile(t *testing.T) {
	t.Parallel()
	r := newReplayFixture(t, "a", "b", "c")
	// The staging file "p-1" served a, then (recycled) b, which is still
	// open at the crash and holds b's bytes now.
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "p-1"), []byte("b's bytes, still live"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "p-2"), []byte("c's final bytes"), 0o600))
	live := func(path, name string) {
		r.records = append(r.records, journalRecord{kind: recLive, id: r.id(path), data: []byte(name)})
	}
	live("a", "p-1")
	r.records = append(r.records,
		journalRecord{kind: recDetach, id: r.id("a")},
		journalRecord{kind: recTrunc, id: r.id("a")})
	r.write("a", 0, []byte("a's content, journaled at its drop"), 34)
	live("b", "p-1")
	live("c", "p-2")
	r.records = append(r.records, journalRecord{kind: recUnlive, id: r.id("c")})
	r.write("c", 0, []byte("C"), 15)
	s := r.replay()
	require.Equal(t, "a's content, journaled at its drop", r.content(s, "a"))
	require.Equal(t, "b's bytes, still live", r.content(s, "b"))
	require.Equal(t, "C's final bytes", r.content(s, "c"), "the unlive record's file, then the write after it")

	// A detach record names a file that is live, or the journal is bad.
	r = newReplayFixture(t, "a")
	r.records = append(r.records, journalRecord{kind: recDetach, id: r.id("a")})
	r.writeJournal()
	s = newSession("s", r.e.store, r.e.cache, &r.e.inos, &r.e.buffers, r.root, false, r.e.log)
	s.gen, s.backingDir = r.gen, r.dir
	_, err := s.replayJournal(context.Background(), journalPath(r.e.storeDir, "s"), false)
	require.ErrorContains(t, err, "no live record")
}

// replayFixture is a stored session "s" of empty files (one named "link"
// is a hard link of the first) and a journal of records for them,
// replayed into a fresh Session as a new daemon would.
type replayFixture struct {
	t       testing.TB
	e       *Engine
	root    cas.Ref
	gen     uint64
	dir     string
	records []journalRecord
	ids     map[string]uint64 // journal ids bound so far, by path
}

func newReplayFixture(t testing.TB, files ...string) *replayFixture {
	t.Helper()
	ctx := context.Background()
	e := newTestEngine(t, nil, Options{FlushInterval: -1})
	tree := &manifest.Tree{}
	for _, name := range files {
		e := manifest.Entry{Name: name, Kind: manifest.KindFile, Mode: 0o644}
		if name == "link" {
			// A hard link of the first file.
			tree.Entries[0].LinkID, tree.Entries[0].Nlink = 1, 2
			e.LinkID, e.Nlink = 1, 2
		}
		tree.Entries = append(tree.Entries, e)
	}
	root, err := manifest.PutTree(ctx, e.store, tree)
	require.NoError(t, err)
	h, err := e.cat.CreateSessionAt(ctx, "s", root)
	require.NoError(t, err)
	dir := backingDir(e.storeDir, "s")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	return &replayFixture{t: t, e: e, root: root, gen: h.Gen, dir: dir, ids: map[string]uint64{}}
}

// id returns the journal id of path, binding it first as the daemon does:
// once per file, so a hard link's names share one.
func (r *replayFixture) id(path string) uint64 {
	key := path
	if path == "link" {
		key = "a" // the fixture's hard link is of the first file, "a"
	}
	if id, ok := r.ids[key]; ok {
		return id
	}
	id := uint64(len(r.ids) + 2)
	r.ids[key] = id
	r.records = append(r.records, journalRecord{kind: recBind, id: id, path: path})
	return id
}

func (r *replayFixture) stage(path, name string, content []byte) {
	require.NoError(r.t, os.WriteFile(filepath.Join(r.dir, name), content, 0o600))
	r.records = append(r.records, journalRecord{kind: recStage, id: r.id(path), size: int64(len(content)), data: []byte(name)})
}

func (r *replayFixture) write(path string, off int64, data []byte, size int64) {
	r.records = append(r.records, journalRecord{kind: recWrite, id: r.id(path), off: off, size: size, data: data})
}

// writeJournal writes the records as one append.
func (r *replayFixture) writeJournal() {
	j, err := openJournal(r.e.storeDir, "s")
	require.NoError(r.t, err)
	require.NoError(r.t, j.reset(r.gen))
	require.NoError(r.t, j.append(r.records))
	require.NoError(r.t, j.close())
}

// session replays the journal into a fresh Session of the stored root.
func (r *replayFixture) session() *Session {
	e := r.e
	s := newSession("s", e.store, e.cache, &e.inos, &e.buffers, r.root, false, e.log)
	s.gen, s.backingDir = r.gen, r.dir
	ok, err := s.replayJournal(context.Background(), journalPath(e.storeDir, "s"), false)
	require.NoError(r.t, err)
	require.True(r.t, ok)
	return s
}

func (r *replayFixture) replay() *Session {
	r.writeJournal()
	return r.session()
}

// release drops what s buffered, so that sessions replayed one after the
// other do not add up in the engine's budget.
func (r *replayFixture) release(s *Session, path string) {
	n, err := s.walkFile(context.Background(), path)
	require.NoError(r.t, err)
	n.mu.Lock()
	defer n.mu.Unlock()
	require.NoError(r.t, n.truncate(context.Background(), 0))
}

func (r *replayFixture) content(s *Session, path string) string {
	n, err := s.walkFile(context.Background(), path)
	require.NoError(r.t, err)
	n.mu.Lock()
	defer n.mu.Unlock()
	buf := make([]byte, n.data.size)
	k, err := n.readAt(context.Background(), buf, 0)
	require.NoError(r.t, err)
	return string(buf[:k])
}

// BenchmarkReplayStaged replays the journal a staged file leaves after N
// fsyncs as it grew by 4 KiB each: the cost is the records plus one read
// of the file, whatever N.
func BenchmarkReplayStaged(b *testing.B) {
	for _, fsyncs := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("fsyncs=%d", fsyncs), func(b *testing.B) {
			r := newReplayFixture(b, "out.log")
			content := randBytes(61, fsyncs*4096)
			require.NoError(b, os.WriteFile(filepath.Join(r.dir, "stage-1"), content, 0o600))
			for i := 1; i <= fsyncs; i++ {
				r.records = append(r.records, journalRecord{path: "out.log", off: stageOff, size: int64(i * 4096), data: []byte("stage-1")})
			}
			r.writeJournal()
			b.ResetTimer()
			var read int64
			for range b.N {
				s := r.session()
				read += s.replayed.stagedBytes
				b.StopTimer()
				if got := r.content(s, "out.log"); !bytes.Equal(content, []byte(got)) {
					b.Fatalf("replayed %d bytes, want %d", len(got), len(content))
				}
				r.release(s, "out.log")
				b.StartTimer()
			}
			b.ReportMetric(float64(read)/float64(b.N), "staged-bytes/op")
		})
	}
}
