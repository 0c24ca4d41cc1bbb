package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/api"
)

// TestRemoteLogOfPulled: on a host that pulled a session and has no local
// session of that name, log SESSION walks from its newest pulled snapshot
// (across the fork it came from), and log SNAPSHOT from that snapshot.
func TestRemoteLogOfPulled(t *testing.T) {
	_, _, h := remoteHosts(t, 2)
	a, b := h[0], h[1]
	c1 := a.captureFiles("s", map[string]string{"workspace/f.txt": "one\n"})
	c2 := a.captureFiles("s", map[string]string{"workspace/f.txt": "two\n"})
	a.ok("fork", "s@"+c2.ID[:12], "t")
	var t1 captureResult
	require.NoError(t, json.Unmarshal([]byte(a.ok("capture", "t", "-m", "turn of t", "--push", "origin", "--json")), &t1))

	logIDs := func(spec string) []string {
		t.Helper()
		var entries []api.SnapshotInfo
		require.NoError(t, json.Unmarshal([]byte(b.ok("log", spec, "--json")), &entries))
		var ids []string
		for _, e := range entries {
			ids = append(ids, e.ID)
		}
		return ids
	}
	b.fails(exitNotFound, "homefs pull t REMOTE", "log", "t")
	b.ok("pull", "t", "origin")
	require.Equal(t, []string{t1.ID, c2.ID, c1.ID}, logIDs("t"))
	out := b.ok("log", "t")
	require.Contains(t, out, "turn of t")
	require.Contains(t, out, "(fork point)")
	// s arrived as t's lineage: its newest snapshot here is c2.
	require.Equal(t, []string{c2.ID, c1.ID}, logIDs("s"))
	require.Equal(t, []string{c1.ID}, logIDs(c1.ID[:12]))
	require.Equal(t, []string{c2.ID, c1.ID}, logIDs("s@"+c2.ID[:8]))
	b.fails(exitNotFound, "no such snapshot", "log", "0123456789ab")
}
