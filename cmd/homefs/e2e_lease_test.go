package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/daemon"
	"github.com/homefs/homefs/internal/remote/s3test"
)

// leaseHosts starts two daemons, two hosts, with the remote origin on one
// bucket of a real S3 server.
func leaseHosts(t *testing.T) (a, b *env) {
	srv := s3test.Start(t)
	url := "s3://" + srv.Bucket(t) + "/fleet"
	creds := []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey}
	a, b = newEnv(t), newEnv(t)
	for _, e := range []*env{a, b} {
		e.daemonEnv = creds
		e.start()
		e.ok("remote", "add", "origin", url, "--endpoint", srv.Endpoint)
	}
	return a, b
}

func (e *env) lease(args ...string) api.LeaseInfo {
	e.t.Helper()
	var l api.LeaseInfo
	require.NoError(e.t, json.Unmarshal([]byte(e.ok(append(args, "--json")...)), &l))
	return l
}

// rootID is the id that names e's daemon as a lease holder.
func (e *env) rootID() string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.root, daemon.RootIDFile))
	require.NoError(e.t, err)
	return strings.TrimSpace(string(b))
}

// waitFor polls cond; the deadline only bounds a broken run.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
	}
}

// TestLeaseTwoHosts: host A holds a session's lease and B is refused
// naming A, until A releases; a held lease outlives its ttl by renewals,
// and expires once its daemon stops; --steal takes a live lease, and the
// robbed daemon drops it at its next renewal.
func TestLeaseTwoHosts(t *testing.T) {
	a, b := leaseHosts(t)

	a.fails(exitNotFound, "no lease", "lease", "show", "s", "origin")
	la := a.lease("lease", "acquire", "s", "origin")
	require.True(t, la.Live && la.Ours && la.Kept, "%+v", la)
	idA := a.rootID()
	require.Equal(t, idA, la.Holder.ID)
	require.Contains(t, a.ok("lease", "show", "s"), "live, holder "+la.Holder.Host+" (id "+idA+"), this daemon")

	r := b.fails(exitConflict, "is leased to", "lease", "acquire", "s", "origin")
	require.Contains(t, r.stderr, idA, "the refusal names the holder")
	b.fails(exitConflict, idA, "lease", "release", "s", "origin")
	lb := b.lease("lease", "show", "s", "origin")
	require.Equal(t, la.Holder, lb.Holder)
	require.True(t, lb.Live)
	require.False(t, lb.Ours || lb.Kept)

	require.True(t, a.lease("lease", "release", "s", "origin").Released)
	require.False(t, a.lease("lease", "show", "s", "origin").Kept)

	// B holds it with a short ttl; its daemon renews it past the first
	// expiry, so that A stays refused.
	lb = b.lease("lease", "acquire", "s", "origin", "--ttl", "3s")
	idB := b.rootID()
	require.NotEqual(t, idA, idB)
	waitFor(t, "a renewal past the first expiry", func() bool {
		return a.lease("lease", "show", "s", "origin").Renewed.After(lb.Expires)
	})
	a.fails(exitConflict, idB, "lease", "acquire", "s", "origin")

	// A daemon that stops leaves its lease to expire.
	b.stop()
	waitFor(t, "the expiry of a lease no daemon renews", func() bool {
		return !a.lease("lease", "show", "s", "origin").Live
	})
	require.Contains(t, a.ok("lease", "show", "s", "origin"), "expired, holder")
	la = a.lease("lease", "acquire", "s", "origin", "--ttl", "3s")
	require.Equal(t, idA, la.Holder.ID)

	// --steal takes a live lease; A's next renewal finds it taken.
	b.start()
	b.fails(exitConflict, idA, "lease", "acquire", "s", "origin")
	lb = b.lease("lease", "acquire", "s", "origin", "--steal")
	require.Equal(t, idB, lb.Holder.ID)
	waitFor(t, "A to drop the stolen lease", func() bool {
		return !a.lease("lease", "show", "s", "origin").Kept
	})
	require.Contains(t, a.logs.String(), "lease lost")
	a.fails(exitConflict, idB, "lease", "acquire", "s", "origin")
	require.Equal(t, idB, b.lease("lease", "show", "s", "origin").Holder.ID)

	a.fails(exitUsage, "under", "lease", "acquire", "s", "origin", "--ttl", "10ms")
}

// TestLeaseRacingHosts: two hosts acquire one lease at once, round after
// round: exactly one wins each, the other is refused naming it.
func TestLeaseRacingHosts(t *testing.T) {
	a, b := leaseHosts(t)
	hosts := []*env{a, b}
	ids := []string{}
	for round := range 6 {
		results := make([]result, len(hosts))
		var wg sync.WaitGroup
		for i, e := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = e.run("lease", "acquire", "s", "origin")
			}()
		}
		wg.Wait()
		winner := -1
		for i, r := range results {
			if r.code == 0 {
				require.Equal(t, -1, winner, "round %d: both hosts acquired", round)
				winner = i
				continue
			}
			require.Equal(t, exitConflict, r.code, "round %d: %s", round, r.stderr)
			require.Contains(t, r.stderr, "is leased to")
		}
		require.NotEqual(t, -1, winner, "round %d: nobody acquired", round)
		id := hosts[winner].rootID()
		require.Contains(t, results[1-winner].stderr, id, "round %d: the loser is told the winner", round)
		require.Equal(t, id, a.lease("lease", "show", "s", "origin").Holder.ID)
		ids = append(ids, id)
		hosts[winner].ok("lease", "release", "s", "origin")
	}
	t.Logf("winners: %v", ids)
}

// TestLeaseMount: mount --lease takes the session's lease, so that the
// other host's mount --lease is refused; the last unmount that holds it
// releases it.
func TestLeaseMount(t *testing.T) {
	a, b := leaseHosts(t)
	a.ok("session", "create", "s")
	b.ok("session", "create", "s")
	mntA, mntA2, mntB := a.mkdir("a"), a.mkdir("a2"), b.mkdir("b")

	require.Contains(t, a.ok("mount", "--lease", "origin", "s", mntA), "lease held on origin")
	idA := a.rootID()
	l := a.lease("lease", "show", "s", "origin")
	require.True(t, l.Live && l.Ours && l.Kept, "%+v", l)
	writeFile(t, filepath.Join(mntA, "workspace/a.txt"), "from A\n")

	b.fails(exitConflict, idA, "mount", "--lease", "origin", "s", mntB)
	require.False(t, isMounted(t, mntB), "a refused mount leaves nothing mounted")
	b.fails(exitUsage, "not with --snapshot", "mount", "--lease", "origin", "s", mntB, "--snapshot", "abc")

	// Two mounts hold it; the lease goes with the last.
	a.ok("mount", "--lease", "origin", "s", mntA2)
	a.ok("unmount", mntA)
	l = a.lease("lease", "show", "s", "origin")
	require.True(t, l.Live && l.Kept, "a mount still holds the lease: %+v", l)
	a.ok("unmount", mntA2)
	l = a.lease("lease", "show", "s", "origin")
	require.True(t, l.Released, "%+v", l)
	require.False(t, l.Kept)

	b.ok("mount", "--lease", "origin", "s", mntB)
	writeFile(t, filepath.Join(mntB, "workspace/b.txt"), "from B\n")
	require.Equal(t, b.rootID(), a.lease("lease", "show", "s", "origin").Holder.ID)
	a.fails(exitConflict, b.rootID(), "mount", "--lease", "origin", "s", mntA)
	b.ok("unmount", mntB)
	require.True(t, b.lease("lease", "show", "s", "origin").Released)
}

// TestLeaseRun: run --lease takes the session's lease before the run's
// mount, so that the other host's run --lease is refused naming the
// holder, and its command never starts; the daemon keeps (renews) the
// lease while the run lasts, a mount --lease unmounted meanwhile leaves
// it to the run, and the end of the run releases it.
func TestLeaseRun(t *testing.T) {
	a, b := leaseHosts(t)
	for _, e := range []*env{a, b} {
		canon := filepath.Join(e.dir, "canon")
		require.NoError(t, os.MkdirAll(canon, 0o755))
		e.ok("session", "create", "s", "--workspace-at", canon+"/ws")
	}
	// A's command waits for the test to let it end.
	started, stop := filepath.Join(a.dir, "started"), filepath.Join(a.dir, "stop")
	cmd := exec.Command(homefsBin, "run", "--lease", "origin", "s", "--", "sh", "-c",
		`echo from A > a.txt; touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done`, "sh", started, stop)
	cmd.Env = append(os.Environ(), "HOMEFS_ROOT="+a.root)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	waitFor(t, "A's command to start", func() bool { _, err := os.Stat(started); return err == nil })

	idA := a.rootID()
	l := a.lease("lease", "show", "s", "origin")
	require.True(t, l.Live && l.Ours && l.Kept, "the run holds the lease: %+v", l)
	ran := filepath.Join(b.dir, "ran")
	b.fails(exitConflict, idA, "run", "--lease", "origin", "s", "--", "touch", ran)
	require.NoFileExists(t, ran, "a refused run runs nothing")
	require.Empty(t, hostMounts(t, daemon.RunDirFor(b.root)), "a refused run mounts nothing")

	// A mount --lease of the same session comes and goes: the run still
	// holds the lease.
	mnt := a.mkdir("mnt")
	a.ok("mount", "--lease", "origin", "s", mnt)
	a.ok("unmount", mnt)
	l = a.lease("lease", "show", "s", "origin")
	require.True(t, l.Live && l.Kept && !l.Released, "the run still holds the lease: %+v", l)

	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	require.NoError(t, cmd.Wait(), out.String())
	// homefs run returns once the daemon has given the lease back.
	l = a.lease("lease", "show", "s", "origin")
	require.True(t, l.Released, "the end of the run releases the lease: %+v", l)
	require.False(t, l.Kept)

	// Now B may run, and A is refused naming B.
	r := b.run("run", "--lease", "origin", "s", "--", "touch", ran)
	require.Equal(t, 0, r.code, r.stderr)
	require.FileExists(t, ran)
	require.True(t, b.lease("lease", "show", "s", "origin").Released, "B's run released it too")
	b.ok("lease", "acquire", "s", "origin")
	a.fails(exitConflict, b.rootID(), "run", "--lease", "origin", "s", "--", "true")
	a.fails(exitNotFound, "no such remote", "run", "--lease", "nowhere", "s", "--", "true")
}
