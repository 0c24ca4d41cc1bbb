package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/remote/s3test"
)

// TestRemoteEncryptedMarker: host A pushes a session holding a unique
// random marker to a plain and to an encrypted remote in one bucket. The
// scan of the bucket's files finds the marker (and the session's name)
// on the plain remote and nowhere on the encrypted one. Host B, with the
// key from a command, lists, pulls and reads the session lazily. Host C
// is refused with a wrong key, at add and, once its key file changed,
// at the pull after a restart: exit 2, "wrong encryption key".
func TestRemoteEncryptedMarker(t *testing.T) {
	needFUSE(t)
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	url := "s3://" + bucket + "/vault"
	a, b, c := newEnv(t), newEnv(t), newEnv(t)
	for _, e := range []*env{a, b, c} {
		e.daemonEnv = remoteCreds()
		e.start()
	}
	key := s3test.WriteKeyFile(t, randomHex(32))
	wrong := s3test.WriteKeyFile(t, randomHex(32))
	marker := "marker-" + randomHex(24)
	session := "s-" + randomHex(8)

	a.ok("remote", "add", "plain", "s3://"+bucket+"/plain", "--endpoint", srv.Endpoint, "--encrypt=false")
	require.Contains(t, a.ok("remote", "add", "vault", url, "--endpoint", srv.Endpoint, "--encrypt", "--key-file", key), "encrypted (key file "+key+")")
	require.Contains(t, a.ok("remote", "list"), "key file "+key)
	mnt := a.mkdir("a")
	a.ok("session", "create", session)
	a.ok("mount", session, mnt)
	notes := "the secret is " + marker + "\n"
	big := randomText(300<<10, 3)
	writeFile(t, filepath.Join(mnt, "workspace/notes.txt"), notes)
	writeFile(t, filepath.Join(mnt, "workspace/big.txt"), big)
	a.ok("capture", session, "--push", "vault")
	a.ok("push", session, "plain")

	// scan lists the files under dir of the bucket whose name or content
	// holds the marker, the session's name or a stretch of big.txt.
	scan := func(dir string) []string {
		var hits []string
		root := srv.ObjectPath(bucket, dir)
		require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if strings.Contains(p, session) || bytes.Contains(data, []byte(session)) ||
				bytes.Contains(data, []byte(marker)) || bytes.Contains(data, []byte(big[1000:1064])) {
				hits = append(hits, p)
			}
			return nil
		}))
		return hits
	}
	require.GreaterOrEqual(t, len(scan("plain")), 3, "the plain remote shows the marker, the session and the file")
	require.Empty(t, scan("vault"), "the encrypted remote shows nothing")

	// B: the key from a command; the session listed, pulled, read lazily.
	b.ok("remote", "add", "vault", url, "--endpoint", srv.Endpoint, "--encrypt", "--key-command", "cat "+key)
	require.Contains(t, b.ok("remote", "sessions", "vault"), session)
	mntB := b.mkdir("b")
	b.ok("mount", "--remote", "vault", session, mntB)
	require.Equal(t, notes, readFile(t, filepath.Join(mntB, "workspace/notes.txt")))
	require.Equal(t, big, readFile(t, filepath.Join(mntB, "workspace/big.txt")))
	b.ok("unmount", mntB)

	// C: a wrong key is refused at add, and at first use after the key
	// file it was added with changed.
	c.fails(exitUsage, "remote vault: wrong encryption key", "remote", "add", "vault", url, "--endpoint", srv.Endpoint, "--encrypt", "--key-file", wrong)
	c.fails(exitUsage, "--encrypt needs the key's source", "remote", "add", "vault", url, "--endpoint", srv.Endpoint, "--encrypt")
	c.fails(exitUsage, "go with --encrypt", "remote", "add", "vault", url, "--endpoint", srv.Endpoint, "--encrypt=false", "--key-file", key)
	mine := filepath.Join(c.dir, "vault.key")
	k, err := os.ReadFile(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(mine, k, 0o600))
	c.ok("remote", "add", "vault", url, "--endpoint", srv.Endpoint, "--encrypt", "--key-file", mine)
	require.NoError(t, os.WriteFile(mine, []byte(randomHex(32)), 0o600))
	c.stop()
	c.start()
	c.fails(exitUsage, "remote vault: wrong encryption key", "pull", session, "vault")
	c.fails(exitUsage, "wrong encryption key", "remote", "sessions", "vault")
	require.Empty(t, scan("vault"), "nothing the refused host did shows either")
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
