package main

import (
	"cmp"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote"
	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/manifest"
)

// TestRemoteFsckRepair: a chunk damaged in the bucket (a byte flipped in
// the gateway's file) and another deleted are reported by fsck --remote
// with their keys and session (exit 5); a plain push uploads nothing for
// them, push --repair uploads both again; fsck --remote is clean after,
// and a second host pulls and reads the right bytes.
func TestRemoteFsckRepair(t *testing.T) {
	srv, bucket, h := remoteHosts(t, 2)
	a, b := h[0], h[1]
	big := randomText(4*manifest.ChunkSize, 21)
	want := map[string]string{"workspace/big.txt": big, "workspace/small.txt": "small\n"}
	a.captureFiles("s", want)
	require.Contains(t, b.ok("fsck", "--remote", "origin"), "remote origin: checked 1 heads, 1 snapshots")

	damagedKey, lostKey := bigChunkKeys(t, srv, bucket, big)
	path := srv.ObjectPath(bucket, damagedKey)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[len(data)/2] ^= 0x55
	require.NoError(t, os.WriteFile(path, data, 0o644))
	require.NoError(t, os.Remove(srv.ObjectPath(bucket, lostKey)))

	r := b.fails(exitCorrupt, "fsck found problems", "fsck", "--remote", "origin")
	require.Contains(t, r.stdout, "damaged chunk "+damagedKey+": reached by snapshot ")
	require.Contains(t, r.stdout, "missing chunk "+lostKey+": reached by snapshot ")
	require.Contains(t, r.stdout, "(session s)")
	require.Contains(t, r.stdout, ": 2 problems")
	var rep remote.FsckReport
	r = b.fails(exitCorrupt, "fsck found problems", "fsck", "--remote", "origin", "--session", "s", "--json")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Problems, 2)
	states := map[string]string{}
	for _, p := range rep.Problems {
		states[p.Key] = p.State
		require.Equal(t, "s", p.Reached[0].Session)
	}
	require.Equal(t, map[string]string{damagedKey: remote.StateDamaged, lostKey: remote.StateMissing}, states)
	b.fails(exitNotFound, "no head", "fsck", "--remote", "origin", "--session", "nobody")
	b.fails(exitUsage, "--session needs --remote", "fsck", "--session", "s")

	require.Contains(t, a.ok("push", "s", "origin"), "0 objects uploaded", "a plain push skips what is there")
	var res api.PushResult
	require.NoError(t, json.Unmarshal([]byte(a.ok("push", "--repair", "s", "origin", "--json")), &res))
	require.Equal(t, 1, res.Missing)
	require.Equal(t, 1, res.Damaged)
	require.Equal(t, 2, res.Uploaded)
	require.Greater(t, res.Verified, 3)
	require.Contains(t, a.ok("push", "--repair", "s"), "0 missing and 0 damaged uploaded again")
	require.Contains(t, b.ok("fsck", "--remote", "origin"), ": 0 problems")

	b.pullComplete("s", want)
}

// bigChunkKeys returns the keys of two of big's chunks on the remote. On
// a plain remote they are named by their refs; an encrypted remote hides
// the names, so there they are found as the largest objects under
// chunks/ (big's chunks dwarf the session's tree nodes and small files),
// which on a plain remote are big's chunks too.
func bigChunkKeys(t *testing.T, srv *s3test.Server, bucket, big string) (string, string) {
	t.Helper()
	type object struct {
		key  string
		size int64
	}
	var objs []object
	dir := srv.ObjectPath(bucket, "fleet/chunks")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		info, err := e.Info()
		require.NoError(t, err)
		objs = append(objs, object{"fleet/chunks/" + e.Name(), info.Size()})
	}
	slices.SortFunc(objs, func(a, b object) int { return cmp.Compare(b.size, a.size) })
	n := len(big) / manifest.ChunkSize
	require.Greater(t, len(objs), n)
	if !s3test.Encrypted() {
		var want, got []string
		for i := range n {
			want = append(want, "fleet/chunks/"+cas.Sum([]byte(big[i*manifest.ChunkSize:(i+1)*manifest.ChunkSize])).Hex())
			got = append(got, objs[i].key)
		}
		require.ElementsMatch(t, want, got, "the largest objects are big's chunks")
	}
	return objs[0].key, objs[1].key
}
