package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote"
	"github.com/homefs/homefs/internal/remote/s3test"
)

// remoteHosts starts n daemons (hosts) that share remote "origin", a
// bucket of a real S3 server.
func remoteHosts(t *testing.T, n int) (*s3test.Server, string, []*env) {
	t.Helper()
	needFUSE(t)
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	creds := []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey}
	hosts := make([]*env, n)
	for i := range hosts {
		e := newEnv(t)
		e.daemonEnv = creds
		e.start()
		e.ok("remote", "add", "origin", "s3://"+bucket+"/fleet", "--endpoint", srv.Endpoint)
		hosts[i] = e
	}
	return srv, bucket, hosts
}

// captureFiles writes files into session (created and mounted at its
// first capture) and captures it with a push to origin.
func (e *env) captureFiles(session string, files map[string]string) captureResult {
	e.t.Helper()
	mnt := filepath.Join(e.dir, "mnt-"+session)
	if _, err := os.Stat(mnt); err != nil {
		e.mkdir("mnt-" + session)
		e.ok("session", "create", session)
		e.ok("mount", session, mnt)
	}
	for p, content := range files {
		writeFile(e.t, filepath.Join(mnt, p), content)
	}
	var c captureResult
	require.NoError(e.t, json.Unmarshal([]byte(e.ok("capture", session, "--push", "origin", "--json")), &c))
	require.NotNil(e.t, c.Pushed)
	return c
}

func (e *env) remoteSessions() map[string]remote.SessionInfo {
	e.t.Helper()
	var res api.RemoteSessions
	require.NoError(e.t, json.Unmarshal([]byte(e.ok("remote", "sessions", "origin", "--json")), &res))
	out := make(map[string]remote.SessionInfo)
	for _, s := range res.Sessions {
		out[s.Session] = s
	}
	return out
}

// pullComplete pulls session's remote head with every chunk onto e,
// exports it and checks fsck and the files.
func (e *env) pullComplete(session string, want map[string]string) {
	e.t.Helper()
	var pull api.PullResult
	require.NoError(e.t, json.Unmarshal([]byte(e.ok("pull", session, "origin", "--all", "--json")), &pull))
	require.Contains(e.t, e.ok("fsck"), "0 problems")
	dest := filepath.Join(e.dir, "export-"+pull.Snapshot[:12])
	e.ok("export", pull.Snapshot, dest)
	for p, content := range want {
		require.Equal(e.t, content, readFile(e.t, filepath.Join(dest, p)), "%s of %s", p, session)
	}
}

// TestRemoteSessionsList: remote sessions lists each session's head,
// record count and sizes, as pushed by two hosts.
func TestRemoteSessionsList(t *testing.T) {
	_, _, h := remoteHosts(t, 2)
	a, b := h[0], h[1]
	require.Contains(t, a.ok("remote", "sessions", "origin"), "no sessions on remote origin")
	big := randomText(1<<20, 7)
	a.captureFiles("s1", map[string]string{"workspace/big.txt": big})
	c2 := a.captureFiles("s1", map[string]string{"workspace/small.txt": "two\n"})
	c3 := b.captureFiles("s2", map[string]string{"workspace/b.txt": "from b\n"})

	got := a.remoteSessions()
	require.Len(t, got, 2)
	require.Equal(t, c2.ID, got["s1"].Head)
	require.Equal(t, 2, got["s1"].Snapshots)
	require.Greater(t, got["s1"].Bytes, int64(len(big)), "incompressible: stored in full")
	require.GreaterOrEqual(t, got["s1"].Bytes, got["s1"].HeadBytes)
	require.Greater(t, got["s1"].HeadBytes, int64(len(big)))
	require.Equal(t, c3.ID, got["s2"].Head)
	require.Equal(t, 1, got["s2"].Snapshots)
	require.Less(t, got["s2"].Bytes, int64(len(big)/10))
	require.False(t, got["s2"].HeadUpdated.IsZero())
	require.Equal(t, got, b.remoteSessions(), "every host sees the same")
	out := b.ok("remote", "sessions")
	require.Contains(t, out, "s1")
	require.Contains(t, out, shortID(c2.ID))
	b.fails(exitNotFound, "no such remote", "remote", "sessions", "nowhere")
}

// TestRemoteForgetPurge: forget --remote applies local forget's keep
// rules to a session's records and never forgets its head; session rm
// --purge --remote removes head and records there, and nothing locally.
func TestRemoteForgetPurge(t *testing.T) {
	_, _, h := remoteHosts(t, 2)
	a, b := h[0], h[1]
	var ids []string
	for i := range 4 {
		c := a.captureFiles("s", map[string]string{"workspace/turn.txt": randomText(4096, uint64(10+i))})
		ids = append(ids, c.ID)
	}
	b.captureFiles("other", map[string]string{"workspace/o.txt": "other\n"})
	require.Equal(t, 4, a.remoteSessions()["s"].Snapshots)

	var dry api.ForgetResult
	require.NoError(t, json.Unmarshal([]byte(b.ok("forget", "--remote", "origin", "--session", "s", "--keep-last", "2", "--dry-run", "--json")), &dry))
	require.ElementsMatch(t, ids[:2], dry.Forgotten)
	require.Len(t, dry.Decisions, 4)
	require.Equal(t, 4, a.remoteSessions()["s"].Snapshots, "a dry run deletes nothing")

	out := b.ok("forget", "--remote", "origin", "--session", "s", "--keep-last", "2")
	require.Contains(t, out, "forgot 2 snapshots; run homefs gc --remote")
	s := a.remoteSessions()["s"]
	require.Equal(t, 2, s.Snapshots)
	require.Equal(t, ids[3], s.Head)
	b.fails(exitNotFound, "no such snapshot", "pull", ids[0], "origin")
	a.ok("fsck") // nothing local was forgotten
	require.Contains(t, a.ok("log", "s"), shortID(ids[0]))

	// The head is never forgotten; a forgotten one is not there.
	b.fails(exitConflict, "is a session's head", "forget", "--remote", "origin", ids[3])
	b.fails(exitNotFound, "no such snapshot", "forget", "--remote", "origin", ids[0])
	require.Contains(t, b.ok("forget", "--remote", "origin", ids[2]), "forgot 1 snapshots")
	require.Equal(t, 1, a.remoteSessions()["s"].Snapshots)

	b.fails(exitUsage, "needs --purge", "session", "rm", "--remote", "origin", "s")
	var purge api.RemoveSessionResult
	require.NoError(t, json.Unmarshal([]byte(b.ok("session", "rm", "--purge", "--remote", "origin", "s", "--json")), &purge))
	require.Equal(t, []string{ids[3]}, purge.Forgotten)
	got := a.remoteSessions()
	require.NotContains(t, got, "s")
	require.Contains(t, got, "other")
	b.fails(exitNotFound, "no such snapshot", "pull", "s", "origin")
	b.fails(exitNotFound, "no such snapshot", "session", "rm", "--purge", "--remote", "origin", "s")
	require.Contains(t, a.ok("session", "list"), "s", "the local session stays")
	a.ok("capture", "s") // and works
}

// TestRemoteGCRacesPush: host B pushes a snapshot whose tree is already
// on the remote (left by a purged session of host A, so gc deletes it
// unless the push holds it), while A runs gc --remote. Whatever the
// interleaving, the pushed snapshot is complete afterwards: a third host
// pulls it with every chunk, fscks and exports it.
func TestRemoteGCRacesPush(t *testing.T) {
	_, _, h := remoteHosts(t, 3)
	a, b, c := h[0], h[1], h[2]
	for round := range 3 {
		files := map[string]string{
			"workspace/big.txt":   randomText(2<<20, uint64(100+round)),
			"workspace/small.txt": "round\n",
		}
		old := "old" + string(rune('a'+round))
		a.captureFiles(old, files)
		a.ok("session", "rm", "--purge", "--remote", "origin", old)
		// Now every object of the tree is on the remote and unreached.

		name := "new" + string(rune('a'+round))
		b.mkdir("mnt-" + name)
		b.ok("session", "create", name)
		b.ok("mount", name, filepath.Join(b.dir, "mnt-"+name))
		for p, content := range files {
			writeFile(t, filepath.Join(b.dir, "mnt-"+name, p), content)
		}
		b.ok("capture", name)

		var wg sync.WaitGroup
		var push, gc result
		wg.Go(func() { push = b.run("push", name, "origin", "--json") })
		wg.Go(func() { gc = a.run("gc", "--remote", "origin", "--json") })
		wg.Wait()
		require.Equal(t, 0, push.code, "push: %s", push.stderr)
		require.Equal(t, 0, gc.code, "gc: %s", gc.stderr)
		var pr api.PushResult
		require.NoError(t, json.Unmarshal([]byte(push.stdout), &pr))
		t.Logf("round %d: push uploaded %d objects; gc: %s", round, pr.Uploaded, gc.stdout)

		c.pullComplete(name, files)
		// A later gc keeps it too.
		a.ok("gc", "--remote", "origin")
		require.Equal(t, pr.Snapshot, a.remoteSessions()[name].Head)
	}
	// Everything the heads reach survived every gc: a fresh host pulls
	// each round's snapshot complete.
	d := newEnv(t)
	d.daemonEnv = c.daemonEnv
	d.start()
	cfg := a.origin(t)
	d.ok("remote", "add", "origin", cfg.URL, "--endpoint", cfg.Endpoint)
	for round := range 3 {
		d.pullComplete("new"+string(rune('a'+round)), map[string]string{"workspace/small.txt": "round\n"})
	}
}

func (e *env) origin(t *testing.T) remote.Config {
	t.Helper()
	var list []remote.Config
	require.NoError(t, json.Unmarshal([]byte(e.ok("remote", "list", "--json")), &list))
	require.Len(t, list, 1)
	return list[0]
}

// TestRemotePurgeMarker: a unique incompressible marker written into a
// session is in the bucket's files after its push, and in none of them
// after session rm --purge --remote and gc --remote; the other session
// still passes fsck --remote and pulls complete.
func TestRemotePurgeMarker(t *testing.T) {
	srv, bucket, h := remoteHosts(t, 2)
	a, b := h[0], h[1]
	marker := make([]byte, 256<<10)
	r := rand.New(rand.NewPCG(42, 4242))
	for i := range marker {
		marker[i] = byte(r.Uint32())
	}
	keep := map[string]string{"workspace/keep.txt": randomText(300<<10, 9)}
	a.captureFiles("secret", map[string]string{"workspace/notes.txt": "before\n", "codex-home/secret.bin": string(marker)})
	a.captureFiles("secret", map[string]string{"workspace/notes.txt": "after\n"})
	b.captureFiles("keep", keep)

	probes := [][]byte{marker[:64], marker[len(marker)/2 : len(marker)/2+64], marker[len(marker)-64:]}
	found := func() []string {
		var hits []string
		root := srv.ObjectPath(bucket, "")
		require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, pr := range probes {
				if bytes.Contains(data, pr) {
					hits = append(hits, p)
					break
				}
			}
			return nil
		}))
		return hits
	}
	// An encrypted remote never holds it (TestRemoteEncryptedMarker).
	onRemote := require.NotEmpty
	if s3test.Encrypted() {
		onRemote = require.Empty
	}
	onRemote(t, found(), "the marker is on the remote after the push")

	b.ok("session", "rm", "--purge", "--remote", "origin", "secret")
	onRemote(t, found(), "a purge deletes records and the head, not chunks")
	var gc remote.GCResult
	require.NoError(t, json.Unmarshal([]byte(b.ok("gc", "--remote", "origin", "--json")), &gc))
	require.Equal(t, 1, gc.Heads)
	require.Positive(t, gc.DeletedChunks)
	require.GreaterOrEqual(t, gc.DeletedBytes, int64(len(marker)))
	require.Empty(t, found(), "no object holds the marker after gc --remote")
	require.NotContains(t, b.remoteSessions(), "secret")
	// Every object the remaining head reaches is there and intact.
	var fsck remote.FsckReport
	require.NoError(t, json.Unmarshal([]byte(a.ok("fsck", "--remote", "origin", "--json")), &fsck))
	require.Equal(t, 1, fsck.Heads, "the kept session's head")
	require.Positive(t, fsck.Objects)
	require.Empty(t, fsck.Problems, "fsck --remote after the purge and gc")

	// A second gc finds nothing to delete; the kept session is whole.
	var again remote.GCResult
	require.NoError(t, json.Unmarshal([]byte(a.ok("gc", "--remote", "origin", "--json")), &again))
	require.Zero(t, again.DeletedChunks)
	require.Zero(t, again.DeletedRecords)
	require.Equal(t, gc.Chunks, again.Chunks)
	c := newEnv(t)
	c.daemonEnv = a.daemonEnv
	c.start()
	c.ok("remote", "add", "origin", a.origin(t).URL, "--endpoint", srv.Endpoint)
	c.pullComplete("keep", keep)
	require.Contains(t, a.ok("fsck"), "0 problems", "the local store is untouched")
}
