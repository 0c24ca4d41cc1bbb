package remote

import (
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/manifest"
)

// treeRef returns the ref of the directory at path (names) under root.
func treeRef(t *testing.T, g cas.Getter, root cas.Ref, names ...string) cas.Ref {
	t.Helper()
	ref := root
	for _, name := range names {
		tree, err := manifest.GetTree(context.Background(), g, ref)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(tree.Entries, func(e manifest.Entry) bool { return e.Name == name })
		if i < 0 {
			t.Fatalf("no %s in tree %s", name, ref.Short())
		}
		ref = tree.Entries[i].Tree
	}
	return ref
}

func mustFsck(t *testing.T, r *Remote, opts FsckOptions) *FsckReport {
	t.Helper()
	rep, err := Fsck(context.Background(), r, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// problemsByKey maps each problem's key to it.
func problemsByKey(rep *FsckReport) map[string]ObjectProblem {
	out := make(map[string]ObjectProblem)
	for _, p := range rep.Problems {
		out[p.Key] = p
	}
	return out
}

// TestFsckRepair: fsck --remote finds a damaged chunk shared by two
// sessions, a lost chunk under an index node, a lost tree node and a
// damaged ancestor record, each with what reaches it; a plain push
// uploads nothing for them; a repair push uploads exactly them; fsck is
// clean after, and another host pulls the right bytes.
func TestFsckRepair(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	r := openRemote(t, srv, bucket)
	a := newHost(t)
	want1 := sampleFiles()
	id1 := a.capture(t, "s1", want1)
	want2 := maps.Clone(want1)
	want2["notes/new.txt"] = []byte("turn two\n")
	id2 := a.capture(t, "s1", want2)
	want3 := files{"rollout.jsonl": want1["rollout.jsonl"], "other.txt": []byte("s2\n")}
	id3 := a.capture(t, "s2", want3)
	for _, s := range []string{"s1", "s2"} {
		if _, err := Push(ctx, a.store, a.cat, r, s, PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rep := mustFsck(t, r, FsckOptions{})
	if len(rep.Problems) != 0 || rep.Heads != 2 || rep.Snapshots != 3 || rep.Objects == 0 {
		t.Fatalf("fsck of an intact remote: %+v", rep)
	}

	_, snap1, err := a.cat.Record(ctx, id1)
	if err != nil {
		t.Fatal(err)
	}
	shared := cas.Sum(want1["rollout.jsonl"][:manifest.ChunkSize])
	lost := cas.Sum(want1["big/index-file.bin"][5*manifest.ChunkSize : 6*manifest.ChunkSize])
	deep := treeRef(t, a.store, snap1.Root, "notes", "deep")
	// The remote's own key for a name (hidden on an encrypted remote).
	key := func(dir, name string) string { return r.prefix + dir + r.objectName(dir, name) }
	damage(t, srv.ObjectPath(bucket, key(chunksDir, shared.Hex())))
	damage(t, srv.ObjectPath(bucket, key(snapshotsDir, id1)))
	for _, ref := range []cas.Ref{lost, deep} {
		if err := os.Remove(srv.ObjectPath(bucket, key(chunksDir, ref.Hex()))); err != nil {
			t.Fatal(err)
		}
	}

	// A push finds everything present and uploads nothing.
	if res, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{}); err != nil || res.Uploaded != 0 {
		t.Fatalf("plain push over damage: %+v, %v", res, err)
	}

	checkFsckProblems(t, mustFsck(t, r, FsckOptions{}), map[string]ObjectProblem{
		key(chunksDir, shared.Hex()): {Kind: "chunk", Ref: shared, State: StateDamaged,
			Reached: []Reach{{Snapshot: id2, Session: "s1"}, {Snapshot: id3, Session: "s2"}}},
		key(chunksDir, lost.Hex()): {Kind: "chunk", Ref: lost, State: StateMissing,
			Reached: []Reach{{Snapshot: id2, Session: "s1"}}},
		key(chunksDir, deep.Hex()): {Kind: "tree", Ref: deep, State: StateMissing,
			Reached: []Reach{{Snapshot: id2, Session: "s1"}}},
		key(snapshotsDir, id1): {Kind: "record", State: StateDamaged,
			Reached: []Reach{{Snapshot: id1, Session: "s1"}}},
	})
	// One session: only what its head reaches.
	only := mustFsck(t, r, FsckOptions{Session: "s2"})
	if len(only.Problems) != 1 || only.Problems[0].Ref != shared || !slices.Equal(only.Problems[0].Reached, []Reach{{Snapshot: id3, Session: "s2"}}) {
		t.Fatalf("fsck of s2: %+v", only.Problems)
	}
	if _, err := Fsck(ctx, r, FsckOptions{Session: "nobody"}); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("fsck of a session without a head: %v", err)
	}

	checkRepairPush(t, a, r)
	checkPullAll(t, r, map[string]files{id1: want1, id2: want2, id3: want3})
}

// checkFsckProblems requires rep to report exactly the problems of want,
// by key, each with an error.
func checkFsckProblems(t *testing.T, rep *FsckReport, want map[string]ObjectProblem) {
	t.Helper()
	got := problemsByKey(rep)
	if len(got) != len(want) {
		t.Fatalf("fsck found %d problems, want %d: %+v", len(got), len(want), got)
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Fatalf("fsck did not report %s; got %+v", k, got)
		}
		if g.Kind != w.Kind || g.Ref != w.Ref || g.State != w.State || !slices.Equal(g.Reached, w.Reached) || g.Err == "" {
			t.Errorf("%s: got %+v, want %+v", k, g, w)
		}
	}
}

// checkRepairPush requires a repair push of s1 to upload exactly the two
// damaged and two missing objects, fsck to be clean after it, and a second
// repair to find nothing.
func checkRepairPush(t *testing.T, a *host, r *Remote) {
	t.Helper()
	ctx := context.Background()
	res, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Damaged != 2 || res.Missing != 2 || res.Uploaded != 4 || res.Records != 1 || res.Verified == 0 || res.HeadMoved {
		t.Fatalf("repair: %+v", res)
	}
	if rep := mustFsck(t, r, FsckOptions{}); len(rep.Problems) != 0 || rep.Snapshots != 3 {
		t.Fatalf("fsck after the repair: %+v", rep)
	}
	res, err = Push(ctx, a.store, a.cat, r, "s1", PushOptions{Repair: true})
	if err != nil || res.Damaged != 0 || res.Missing != 0 || res.Uploaded != 0 {
		t.Fatalf("second repair: %+v, %v", res, err)
	}
}

// checkPullAll pulls each snapshot of want whole onto a new host and
// requires its files.
func checkPullAll(t *testing.T, r *Remote, want map[string]files) {
	t.Helper()
	ctx := context.Background()
	b := newHost(t)
	for id, w := range want {
		if _, err := Pull(ctx, b.store, b.cat, r, id, PullOptions{All: true}); err != nil {
			t.Fatal(err)
		}
		got, err := readFiles(t, b.store, b.cat, id)
		if err != nil {
			t.Fatal(err)
		}
		equalFiles(t, got, w)
	}
}
