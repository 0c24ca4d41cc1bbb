package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// filesHolding returns the files under dir whose bytes contain needle.
func filesHolding(t *testing.T, dir string, needle []byte) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // a file Badger removed meanwhile
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if bytes.Contains(data, needle) {
			hits = append(hits, p)
		}
		return nil
	})
	require.NoError(t, err)
	return hits
}

// TestPurgeErasesMarker: a secret written into a session and captured is,
// after session rm --purge and gc, in no file under the daemon's root,
// both while the daemon runs (right after gc) and once it has stopped;
// every other session and snapshot still passes fsck, and a fork of the
// purged session keeps working, its log showing the forgotten origin.
func TestPurgeErasesMarker(t *testing.T) {
	e := newEnv(t)
	e.start()
	secret := e.mkdir("secret")
	keep := e.mkdir("keep")
	e.ok("session", "create", "secret")
	e.ok("session", "create", "keep")
	e.ok("mount", "secret", secret)
	e.ok("mount", "keep", keep)

	marker := make([]byte, 256<<10)
	_, _ = rand.Read(marker)
	needle := marker[100<<10 : 100<<10+64]
	require.NoError(t, os.WriteFile(filepath.Join(secret, "key.bin"), marker, 0o600))
	writeFile(t, filepath.Join(secret, "notes.txt"), "shared notes\n")
	e.ok("capture", "secret", "-m", "with the key")
	require.NoError(t, os.Remove(filepath.Join(secret, "key.bin")))
	e.ok("capture", "secret", "-m", "key removed")
	// A fork from after the key was removed shares the rest of the tree.
	e.ok("fork", "secret", "fork")
	writeFile(t, filepath.Join(keep, "keep.txt"), strings.Repeat("keep me ", 1000))
	e.ok("capture", "keep")
	e.ok("unmount", secret)

	require.NotEmpty(t, filesHolding(t, e.root, needle), "the marker must be on disk before the purge, or the test proves nothing")

	var rm struct{ Forgotten []string }
	require.NoError(t, json.Unmarshal([]byte(e.ok("session", "rm", "--purge", "--json", "secret")), &rm))
	require.Len(t, rm.Forgotten, 3, "two captures and the one fork made first")
	out := e.ok("gc")
	require.Contains(t, out, "store files:")

	// Checked while the daemon runs, right after gc: Badger has rewritten
	// or deleted every file that held the marker.
	require.Empty(t, filesHolding(t, e.root, needle), "marker bytes left after purge and gc")
	require.Contains(t, e.ok("fsck"), "0 problems")
	log := e.ok("log", "fork")
	require.Contains(t, log, "(origin secret@")
	require.Contains(t, log, "forgotten)")
	fork := e.mkdir("fork")
	e.ok("mount", "fork", fork)
	require.Equal(t, "shared notes\n", readFile(t, filepath.Join(fork, "notes.txt")))
	e.ok("unmount", fork)
	e.ok("unmount", keep)

	e.stop()
	require.Empty(t, filesHolding(t, e.root, needle), "marker bytes left after the daemon closed its files")
	e.start()
	require.Contains(t, e.ok("fsck"), "0 problems")
	e.fails(exitNotFound, "no such session", "log", "secret")
}

// TestForgetCommand: forget by policy with --dry-run and --json, by name,
// and the refusals.
func TestForgetCommand(t *testing.T) {
	e, mnt := startMounted(t, "mnt")
	var ids []string
	for i := 0; i < 5; i++ {
		writeFile(t, filepath.Join(mnt, "turn.txt"), strings.Repeat("turn ", 100*(i+1)))
		ids = append(ids, strings.TrimSpace(e.ok("capture", "s", "-m", "turn")))
	}
	head := ids[4]

	e.fails(exitUsage, "needs at least one --keep", "forget", "--session", "s")
	e.fails(exitUsage, "name the snapshots", "forget")
	e.fails(exitConflict, "head of session s", "forget", "s@"+head[:12])

	snapMnt := e.mkdir("snap")
	e.ok("mount", "s", snapMnt, "--snapshot", ids[0])
	e.fails(exitConflict, "mounted at "+snapMnt, "forget", ids[0])

	var res struct {
		DryRun    bool     `json:"dry_run"`
		Forgotten []string `json:"forgotten"`
		Decisions []struct {
			ID      string   `json:"id"`
			Keep    bool     `json:"keep"`
			Reasons []string `json:"reasons"`
		} `json:"decisions"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.ok("forget", "--session", "s", "--keep-last", "2", "--dry-run", "--json")), &res))
	require.True(t, res.DryRun)
	require.ElementsMatch(t, []string{ids[2], ids[1]}, res.Forgotten)
	why := map[string][]string{}
	for _, d := range res.Decisions {
		why[d.ID] = d.Reasons
	}
	require.Equal(t, []string{"last", "head of session s"}, why[head])
	require.Equal(t, []string{"last"}, why[ids[3]])
	require.Contains(t, why[ids[0]][0], "mounted at "+snapMnt)
	require.Len(t, strings.Split(strings.TrimSpace(e.ok("log", "s")), "\n"), 6, "a dry run forgets nothing")

	out := e.ok("forget", "--session", "s", "--keep-last", "2")
	require.Contains(t, out, "forgot 2 snapshots")
	log := e.ok("log", "s")
	require.Contains(t, log, "… earlier snapshots forgotten")
	require.Contains(t, log, shortID(ids[0]), "the mounted snapshot is kept and listed after the gap")
	e.ok("gc")
	require.Equal(t, strings.Repeat("turn ", 100), readFile(t, filepath.Join(snapMnt, "turn.txt")))
	require.Contains(t, e.ok("fsck"), "0 problems")
	e.ok("unmount", snapMnt)
	e.ok("forget", ids[0])
	e.fails(exitNotFound, "no such snapshot", "forget", ids[0])
	e.ok("capture", "s")
	e.ok("gc")
	require.Contains(t, e.ok("fsck"), "0 problems")
}
