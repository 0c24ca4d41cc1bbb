package main

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote"
	"github.com/homefs/homefs/internal/remote/s3test"
)

// TestRemoteTwoHosts: two daemons with separate roots share a bucket of a
// real S3 server (versitygw; see s3test for when the test skips or fails).
// A captures and pushes; B pulls and mounts lazily; A pushes a small
// change; B's diverging push is a conflict.
func TestRemoteTwoHosts(t *testing.T) {
	needFUSE(t)
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	url := "s3://" + bucket + "/fleet"
	creds := []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey}
	a, b := newEnv(t), newEnv(t)
	a.daemonEnv, b.daemonEnv = creds, creds
	a.start()
	b.start()

	for _, e := range []*env{a, b} {
		e.fails(exitNotFound, "none configured", "push", "s")
		require.Contains(t, e.ok("remote", "add", "origin", url, "--endpoint", srv.Endpoint), "added remote origin")
		e.fails(exitConflict, "exists", "remote", "add", "origin", url, "--endpoint", srv.Endpoint)
		e.fails(exitUsage, "want s3://BUCKET", "remote", "add", "bad", "http://x/y", "--endpoint", srv.Endpoint)
		var list []remote.Config
		require.NoError(t, json.Unmarshal([]byte(e.ok("remote", "list", "--json")), &list))
		want := remote.Config{Name: "origin", URL: url, Endpoint: srv.Endpoint}
		if s3test.Encrypted() {
			want.Encryption = remote.Encryption{KeyEnv: s3test.KeyEnv}
		}
		require.Equal(t, []remote.Config{want}, list)
		// The keys are the daemon's: never stored, never shown.
		reg, err := os.ReadFile(filepath.Join(e.root, remote.RegistryFile))
		require.NoError(t, err)
		require.NotContains(t, string(reg), s3test.SecretKey)
		require.NotContains(t, e.ok("remote", "list"), s3test.SecretKey)
	}

	// Host A: write, capture and push in one step.
	mntA := a.mkdir("a")
	a.ok("session", "create", "s")
	a.ok("mount", "s", mntA)
	big := randomText(1<<20, 1) // 1 MiB, incompressible, no repeated chunk
	writeFile(t, filepath.Join(mntA, rollout), "{\"type\":\"session_meta\"}\n")
	writeFile(t, filepath.Join(mntA, "workspace/big.bin"), big)
	var cap1 captureResult
	require.NoError(t, json.Unmarshal([]byte(a.ok("capture", "s", "--push", "origin", "--json")), &cap1))
	require.NotNil(t, cap1.Pushed)
	require.True(t, cap1.Pushed.HeadMoved)
	require.Equal(t, cap1.ID, cap1.Pushed.Snapshot)
	require.Greater(t, cap1.Pushed.UploadedBytes, int64(0))
	require.Contains(t, a.ok("push", "s"), "head already there")

	// Host B: pull the session's head (tree only), mount it, read lazily.
	var pull api.PullResult
	require.NoError(t, json.Unmarshal([]byte(b.ok("pull", "s", "origin", "--json")), &pull))
	require.Equal(t, cap1.ID, pull.Snapshot)
	require.Equal(t, "s", pull.Session)
	require.Less(t, b.stats().PlainBytes, int64(len(big)/2), "a pull without --all fetches no file chunk")
	mntB := b.mkdir("b1")
	out := b.ok("mount", "--remote", "origin", "s", mntB)
	require.Contains(t, out, "from remote origin")
	require.Equal(t, big, readFile(t, filepath.Join(mntB, "workspace/big.bin")))
	require.Equal(t, "{\"type\":\"session_meta\"}\n", readFile(t, filepath.Join(mntB, rollout)))
	b.ok("unmount", mntB)
	require.Greater(t, b.stats().PlainBytes, int64(len(big)/2), "chunks read are kept")

	// A small change on A: the second push costs O(change).
	f, err := os.OpenFile(filepath.Join(mntA, rollout), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString("{\"type\":\"response_item\"}\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	var cap2 captureResult
	require.NoError(t, json.Unmarshal([]byte(a.ok("capture", "s", "--push", "--json")), &cap2))
	require.True(t, cap2.Pushed.HeadMoved)
	require.Less(t, cap2.Pushed.UploadedBytes, cap1.Pushed.UploadedBytes/10, "second push after a small change")
	require.Equal(t, 1, cap2.Pushed.Records)

	// B sees it.
	mntB2 := b.mkdir("b2")
	b.ok("mount", "--remote", "origin", "s", mntB2, "--snapshot", cap2.ID[:12])
	require.Equal(t, "{\"type\":\"session_meta\"}\n{\"type\":\"response_item\"}\n", readFile(t, filepath.Join(mntB2, rollout)))
	b.ok("unmount", mntB2)

	// B resumes from A's first snapshot and diverges: its push is refused.
	checkDivergingPush(t, a, b, cap1.ID, cap2.ID)

	// Errors: unknown remote, unknown snapshot, remote rm.
	b.fails(exitNotFound, "no such remote", "push", "s", "nowhere")
	b.fails(exitNotFound, "no such snapshot", "pull", "nobody", "origin")
	b.ok("remote", "rm", "origin")
	require.Contains(t, b.ok("remote", "list"), "no remotes")
	b.fails(exitNotFound, "no such remote", "remote", "rm", "origin")
	b.fails(exitNotFound, "none configured", "pull", "s")
	require.Contains(t, a.ok("fsck"), "0 problems")
}

// randomText is n bytes of fixed-seed pseudo-random text.
func randomText(n int, seed uint64) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n"
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// checkDivergingPush has b resume session s from A's snapshot first and
// capture --push a diverging turn while the remote head is A's head: the
// push is refused (exit 4) with a message that offers no rerun, which
// could only conflict again, but the two ways out, which then work: the
// turn forked and pushed as a new session, or A's turn pulled.
func checkDivergingPush(t *testing.T, a, b *env, first, head string) {
	t.Helper()
	b.ok("session", "create", "s")
	b.ok("restore", "s", first)
	mntB3 := b.mkdir("b3")
	b.ok("mount", "s", mntB3)
	writeFile(t, filepath.Join(mntB3, "workspace/b.txt"), "from B\n")
	r := b.fails(exitConflict, "head changed concurrently", "capture", "s", "--push", "origin")
	require.Contains(t, r.stderr, "captured ")
	require.NotContains(t, r.stderr, "rerun")
	capB := strings.Fields(strings.TrimSpace(r.stderr))[2] // "homefs: captured ID, …"
	capB = strings.TrimSuffix(capB, ",")
	require.Len(t, capB, 64, r.stderr)
	fork := "homefs fork s@" + capB[:12] + " NEW && homefs capture --push NEW origin"
	require.Contains(t, r.stderr, fork)
	require.Contains(t, r.stderr, "homefs pull s origin")
	b.fails(exitConflict, "head changed concurrently", "push", "s", "origin")
	var onRemote api.PullResult
	require.NoError(t, json.Unmarshal([]byte(a.ok("pull", "s", "--json")), &onRemote))
	require.Equal(t, head, onRemote.Snapshot, "the remote head is still A's")
	b.ok("fork", "s@"+capB[:12], "s-b")
	var capFork captureResult
	require.NoError(t, json.Unmarshal([]byte(b.ok("capture", "--push", "s-b", "origin", "--json")), &capFork))
	require.Equal(t, "s-b", capFork.Pushed.Session)
	require.True(t, capFork.Pushed.HeadMoved, "B's turn is on the remote as s-b")
	var pullA api.PullResult
	require.NoError(t, json.Unmarshal([]byte(b.ok("pull", "s", "origin", "--json")), &pullA))
	require.Equal(t, head, pullA.Snapshot, "the other way: pull A's turn")
}
