package remote

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// An encrypted remote seals every object it writes (AES-256-GCM, a random
// nonce per object, the object's name as associated data) and names
// chunks, records, heads and leases by a keyed HMAC of their plain names;
// docs/ARCHITECTURE-remote.md, "Encryption", has the design and what it
// still shows.

// keyCommandTimeout bounds a key command.
const keyCommandTimeout = 30 * time.Second

// load reads the 32-byte master key from its source.
func loadKey(ctx context.Context, e Encryption, name string) ([]byte, error) {
	var (
		raw []byte
		err error
	)
	switch {
	case e.KeyFile != "":
		raw, err = os.ReadFile(e.KeyFile)
	case e.KeyEnv != "":
		v, ok := os.LookupEnv(e.KeyEnv)
		if !ok {
			err = errors.New("not set in the daemon's environment")
		}
		raw = []byte(v)
	case e.KeyCommand != "":
		raw, err = runKeyCommand(ctx, e.KeyCommand)
	}
	if err == nil {
		raw, err = parseKey(raw)
	}
	if err != nil {
		return nil, fmt.Errorf("remote %s: %s: %v: %w", name, e, err, ErrKeySource)
	}
	return raw, nil
}

func runKeyCommand(ctx context.Context, command string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, keyCommandTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", command)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if len(msg) > 200 {
			msg = msg[len(msg)-200:]
		}
		if msg != "" {
			return nil, fmt.Errorf("%w (%s)", err, msg)
		}
		return nil, err
	}
	return out.Bytes(), nil
}

// parseKey accepts exactly 32 raw bytes, or 64 hex digits or the base64
// of 32 bytes with blanks around them. 32 printable characters are a
// passphrase, not a key (32 random bytes are all printable once in 10^14).
func parseKey(b []byte) ([]byte, error) {
	if len(b) == 32 && slices.ContainsFunc(b, func(c byte) bool { return c < ' ' || c > '~' }) {
		return bytes.Clone(b), nil
	}
	s := strings.TrimSpace(string(b))
	if k, err := hex.DecodeString(s); err == nil && len(k) == 32 {
		return k, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == 32 {
			return k, nil
		}
	}
	return nil, fmt.Errorf("want 32 bytes: raw, 64 hex digits or base64 (have %d bytes)", len(b))
}

// Sealed objects: a version byte, then what AES-256-GCM with a random
// 96-bit nonce makes of the plain bytes (nonce, ciphertext, 16-byte tag).
// The associated data is the version byte and the object's key under the
// prefix, so an object moved or copied to another name fails to open.
const (
	sealVersion  = 1
	sealOverhead = 1 + 12 + 16
)

// keyCheckName is the key check object under the prefix: keyCheckText
// sealed, so that a wrong key fails once, at first use, with ErrWrongKey.
const (
	keyCheckName = "keycheck"
	keyCheckText = "homefs encrypted remote, key check, version 1"
)

// sealer holds an encrypted remote's subkeys.
type sealer struct {
	aead  cipher.AEAD // AES-256-GCM, random nonces
	names []byte      // HMAC-SHA256 key of object names

	mu sync.Mutex  // serializes key checks
	ok atomic.Bool // the key opened the key check object
}

// newSealer derives the content and name subkeys from the master key.
func newSealer(master []byte) (*sealer, error) {
	content, err := hkdf.Key(sha256.New, master, nil, "homefs remote v1 content", 32)
	if err != nil {
		return nil, err
	}
	names, err := hkdf.Key(sha256.New, master, nil, "homefs remote v1 names", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(content)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead, names: names}, nil
}

// name is the object name that stands for plain (a dir and a name in
// the plain layout: "chunks/<ref hex>", "heads/<session>").
func (s *sealer) name(plain string) string {
	m := hmac.New(sha256.New, s.names)
	m.Write([]byte(plain))
	return hex.EncodeToString(m.Sum(nil))
}

func sealAD(name string) []byte { return append([]byte{sealVersion}, name...) }

// seal encrypts plain as the object name (its key under the prefix).
func (s *sealer) seal(name string, plain []byte) []byte {
	out := make([]byte, 1, sealOverhead+len(plain))
	out[0] = sealVersion
	return s.aead.Seal(out, nil, plain, sealAD(name))
}

// open decrypts and authenticates the object name; any failure wraps
// cas.ErrCorrupt.
func (s *sealer) open(name string, sealed []byte) ([]byte, error) {
	if len(sealed) < sealOverhead || sealed[0] != sealVersion {
		return nil, fmt.Errorf("%s: not a sealed object: %w", name, cas.ErrCorrupt)
	}
	plain, err := s.aead.Open(nil, nil, sealed[1:], sealAD(name))
	if err != nil {
		return nil, fmt.Errorf("%s: does not authenticate (damaged, or not this remote's): %w", name, cas.ErrCorrupt)
	}
	return plain, nil
}

// objectName is the name under dir of the object whose plain name is
// name: name itself on a plain remote, its HMAC on an encrypted one.
func (r *Remote) objectName(dir, name string) string {
	if r.crypt == nil {
		return name
	}
	return r.crypt.name(dir + name)
}

// overhead is what sealing adds to an object.
func (r *Remote) overhead() int64 {
	if r.crypt == nil {
		return 0
	}
	return sealOverhead
}

// seal returns what is stored under key for body.
func (r *Remote) seal(key string, body []byte) []byte {
	if r.crypt == nil {
		return body
	}
	return r.crypt.seal(strings.TrimPrefix(key, r.prefix), body)
}

// open returns the plain bytes of the object key as stored.
func (r *Remote) open(key string, stored []byte) ([]byte, error) {
	if r.crypt == nil {
		return stored, nil
	}
	plain, err := r.crypt.open(strings.TrimPrefix(key, r.prefix), stored)
	if err != nil {
		return nil, fmt.Errorf("remote %s: %w", r.cfg.Name, err)
	}
	return plain, nil
}

// keyReady makes sure, before the first request of an encrypted remote,
// that its key opens the key check object (creating it on an empty
// prefix). It is a no-op on a plain remote and after a success; failures
// are not remembered, so a remote back from an outage is checked again.
func (r *Remote) keyReady(ctx context.Context) error {
	c := r.crypt
	if c == nil || c.ok.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok.Load() {
		return nil
	}
	if err := r.checkKey(ctx); err != nil {
		return err
	}
	c.ok.Store(true)
	return nil
}

func (r *Remote) checkKey(ctx context.Context) error {
	key := r.prefix + keyCheckName
	b, _, err := r.fetch(ctx, key, 4<<10)
	if err == nil {
		return r.verifyKeyCheck(b)
	}
	if !errors.Is(err, cas.ErrNotFound) {
		return err
	}
	// No key check: a new remote, on an empty prefix. Another host's key
	// check precedes all its objects, so one the listing finds beside
	// objects is there by now.
	empty, err := r.prefixEmpty(ctx)
	if err != nil {
		return err
	}
	if !empty {
		b, _, err := r.fetch(ctx, key, 4<<10)
		if errors.Is(err, cas.ErrNotFound) {
			return fmt.Errorf("remote %s: %s holds objects but no key check: it is not an encrypted remote (give an empty prefix for a new one): %w",
				r.cfg.Name, r.cfg.URL, ErrNotEncrypted)
		}
		if err != nil {
			return err
		}
		return r.verifyKeyCheck(b)
	}
	_, err = r.store(ctx, key, r.crypt.seal(keyCheckName, []byte(keyCheckText)), "application/octet-stream", "", true)
	if err != nil && !errors.Is(err, ErrConflict) {
		return err
	}
	// Created, or another host created it first: read it back (a server
	// that let two creates through has kept one of them).
	b, _, err = r.fetch(ctx, key, 4<<10)
	if err != nil {
		return err
	}
	return r.verifyKeyCheck(b)
}

func (r *Remote) verifyKeyCheck(b []byte) error {
	plain, err := r.crypt.open(keyCheckName, b)
	if err != nil {
		return fmt.Errorf("remote %s: wrong encryption key: the key from the %s does not open %s/%s (give the key the remote was made with): %w",
			r.cfg.Name, r.cfg.Encryption, r.cfg.URL, keyCheckName, ErrWrongKey)
	}
	if string(plain) != keyCheckText {
		return fmt.Errorf("remote %s: key check: unknown content: %w", r.cfg.Name, cas.ErrCorrupt)
	}
	return nil
}

// prefixEmpty reports whether the prefix holds no object. An encrypted
// remote starts on an empty prefix, never beside a plain remote's objects
// (each side's gc would delete the other's).
func (r *Remote) prefixEmpty(ctx context.Context) (bool, error) {
	objs, _, err := r.objects.List(ctx, r.prefix, "", 1)
	if err != nil {
		return false, err
	}
	return len(objs) == 0, nil
}

// refuseEncrypted keeps a plain client from deleting on an encrypted
// remote, whose object names it would take for unreached refs.
func (r *Remote) refuseEncrypted(ctx context.Context) error {
	if r.crypt != nil {
		return nil
	}
	has, err := r.hasObject(ctx, r.prefix+keyCheckName)
	if err != nil {
		return err
	}
	if has {
		return fmt.Errorf("remote %s: %s is an encrypted remote: add it with --encrypt and its key: %w", r.cfg.Name, r.cfg.URL, ErrEncrypted)
	}
	return nil
}

// sealedHeads reads every head of an encrypted remote (their names say
// nothing of their sessions), Parallel at a time; one removed since the
// listing is left out.
func (r *Remote) sealedHeads(ctx context.Context) ([]*Head, error) {
	var names []string
	if _, err := r.list(ctx, headsDir, "", 0, func(name string) error {
		names = append(names, name)
		return nil
	}); err != nil {
		return nil, err
	}
	heads := make([]*Head, len(names))
	err := parallel(ctx, r.parallel, len(names), func(ctx context.Context, i int) error {
		key := r.prefix + headsDir + names[i]
		b, etag, err := r.getVersioned(ctx, key)
		if errors.Is(err, cas.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		h, err := decodeHead(b)
		if err != nil || r.headKey(h.Session) != key {
			return fmt.Errorf("remote %s: head %s: %w: undecodable or foreign head", r.cfg.Name, names[i], cas.ErrCorrupt)
		}
		h.ETag = etag
		heads[i] = h
		return nil
	})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(heads, func(h *Head) bool { return h == nil }), nil
}

// sealedRecords reads every record of an encrypted remote, by id (the
// hash of its plain bytes, which its name must be the HMAC of); one
// removed since the listing is left out.
func (r *Remote) sealedRecords(ctx context.Context) (map[string]*manifest.Snapshot, error) {
	names, err := r.recordNames(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(names))
	snaps := make([]*manifest.Snapshot, len(names))
	err = parallel(ctx, r.parallel, len(names), func(ctx context.Context, i int) error {
		key := r.prefix + snapshotsDir + names[i]
		b, _, err := r.getObject(ctx, key, manifest.MaxSnapshotSize)
		if errors.Is(err, cas.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		id := manifest.SnapshotID(b)
		if r.recordKey(id) != key {
			return fmt.Errorf("remote %s: record %s: %w: holds snapshot %s", r.cfg.Name, names[i], cas.ErrCorrupt, id[:12])
		}
		snap, err := manifest.DecodeSnapshot(b)
		if err != nil {
			return fmt.Errorf("remote %s: snapshot %s: %w: %w", r.cfg.Name, id, cas.ErrCorrupt, err)
		}
		ids[i], snaps[i] = id, snap
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]*manifest.Snapshot, len(names))
	for i, s := range snaps {
		if s != nil {
			out[ids[i]] = s
		}
	}
	return out, nil
}

// sealedSnapshots is Snapshots on an encrypted remote: names are HMACs,
// so it reads every record to learn the ids that start with prefix.
func (r *Remote) sealedSnapshots(ctx context.Context, prefix string) ([]string, error) {
	recs, err := r.sealedRecords(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for id := range recs {
		if strings.HasPrefix(id, prefix) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}
