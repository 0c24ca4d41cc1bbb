package catalog

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// plantIndex adds index entries for made-up ids, to build prefixes that
// real hashes would take too long to collide on.
func plantIndex(t *testing.T, st cas.Store, session string, ids ...string) {
	t.Helper()
	var ops []cas.NameOp
	for _, id := range ids {
		ops = append(ops, cas.NameOp{Name: snapshotName(id), Value: []byte(session)})
	}
	require.NoError(t, st.Commit(context.Background(), ops, false))
}

func TestSnapshotPrefix(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "s", "")
	require.NoError(t, err)
	id := capture(t, c, st, "s", "1")
	twinA := "deadbeef" + strings.Repeat("0", 56)
	twinB := "deadbeef" + strings.Repeat("1", 56)
	plantIndex(t, st, "s", twinA, twinB)

	tests := []struct {
		name, in string
		want     string
		wantErr  error
	}{
		{"full", id, id, nil},
		{"prefix 8", id[:8], id, nil},
		{"prefix 20", id[:20], id, nil},
		{"upper case", strings.ToUpper(id[:10]), id, nil},
		{"too short", id[:7], "", ErrNoSnapshot},
		{"empty", "", "", ErrNoSnapshot},
		{"not hex", "zzzzzzzzzz", "", ErrNoSnapshot},
		{"too long", id + "0", "", ErrNoSnapshot},
		{"unknown", "0123456789", "", ErrNoSnapshot},
		{"ambiguous", "deadbeef", "", ErrAmbiguous},
		{"ambiguous longer", "deadbeef000", "", cas.ErrNotFound}, // unique, but no record
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap, full, err := c.Snapshot(ctx, tt.in)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, full)
			assert.Equal(t, "s", snap.Session)
		})
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	for _, s := range []string{"a", "b", "empty"} {
		_, err := c.CreateSession(ctx, s, "")
		require.NoError(t, err)
	}
	a1 := capture(t, c, st, "a", "1")
	a2 := capture(t, c, st, "a", "2")
	b1 := capture(t, c, st, "b", "1")
	// A session whose name is also a prefix of a's first snapshot, and
	// whose own last snapshot is b's.
	hexName := a1[:10]
	_, err := c.Fork(ctx, b1, hexName)
	require.NoError(t, err)
	h1 := capture(t, c, st, hexName, "1")

	tests := []struct {
		spec    string
		want    string
		wantErr error
	}{
		{"a", a2, nil},
		{"b", b1, nil},
		{a1, a1, nil},
		{a1[:9], a1, nil},
		{"a@" + a1[:8], a1, nil},
		{"a@" + a2, a2, nil},
		{"@" + a1[:8], a1, nil},
		{"b@" + a1[:8], "", ErrNoSnapshot},  // a1 is not b's
		{hexName, h1, nil},                  // the session wins
		{"@" + hexName, a1, nil},            // unless @ says snapshot
		{hexName + "@" + h1[:8], h1, nil},   // session@snapshot
		{"empty", "", ErrNoSnapshot},        // session without snapshots
		{"nosuch", "", ErrNoSnapshot},       // neither session nor hex
		{"nosuch@" + a1, "", ErrNoSnapshot}, // unknown session
		{"bad/name@" + a1, "", manifest.ErrInvalidName},
		{"a@", "", ErrNoSnapshot},
		{"", "", ErrNoSnapshot},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			snap, id, err := c.Resolve(ctx, tt.spec)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, id)
			assert.Equal(t, tt.want, manifest.SnapshotID(mustEncode(t, snap)))
		})
	}
}

func mustEncode(t *testing.T, s *manifest.Snapshot) []byte {
	t.Helper()
	b, err := manifest.EncodeSnapshot(s)
	require.NoError(t, err)
	return b
}

func TestCorruptRecords(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*Catalog, *tamperStore, string) {
		st := &tamperStore{Store: newTestStore(t), flip: map[cas.Ref]bool{}}
		c := New(st, WithClock(new(stepClock).now))
		_, err := c.CreateSession(ctx, "s", "")
		require.NoError(t, err)
		_, id, err := c.Capture(ctx, "s", manifest.EmptyTreeRef(), "m", nil)
		require.NoError(t, err)
		return c, st, id
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, st *tamperStore, id string)
	}{
		{"store detects", func(t *testing.T, st *tamperStore, id string) {
			require.NoError(t, st.Store.(cas.Corrupter).CorruptForTest(cas.MustParseRef("sha256:"+id)))
		}},
		{"bytes flipped past the store", func(t *testing.T, st *tamperStore, id string) {
			st.flip[cas.MustParseRef("sha256:"+id)] = true
		}},
		{"index names a non-record", func(t *testing.T, st *tamperStore, id string) {
			junk := []byte("not a snapshot")
			ref, err := st.Put(ctx, junk)
			require.NoError(t, err)
			plantIndex(t, st, "s", ref.Hex())
			// Point the head at the junk too, so Resolve and Log meet it.
			h, err := DecodeHead(mustGetName(t, st, "session/s"))
			require.NoError(t, err)
			h.Snapshot = ref.Hex()
			enc, err := EncodeHead(h)
			require.NoError(t, err)
			require.NoError(t, st.Commit(ctx, []cas.NameOp{{Name: "session/s", Value: enc}}, false))
		}},
		{"index names the wrong session", func(t *testing.T, st *tamperStore, id string) {
			plantIndex(t, st, "other", id)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, st, id := setup(t)
			tt.damage(t, st, id)
			h, err := c.Head(ctx, "s")
			require.NoError(t, err)
			_, _, err = c.Snapshot(ctx, h.Snapshot)
			assert.ErrorIs(t, err, cas.ErrCorrupt)
			_, _, err = c.Resolve(ctx, "s")
			assert.ErrorIs(t, err, cas.ErrCorrupt)
			_, err = c.Fork(ctx, h.Snapshot, "f")
			assert.ErrorIs(t, err, cas.ErrCorrupt)
		})
	}

	t.Run("head", func(t *testing.T) {
		c, st, _ := setup(t)
		require.NoError(t, st.Commit(ctx, []cas.NameOp{{Name: "session/s", Value: []byte("{}")}}, false))
		_, err := c.Head(ctx, "s")
		assert.ErrorIs(t, err, cas.ErrCorrupt)
		_, err = c.Sessions(ctx)
		assert.ErrorIs(t, err, cas.ErrCorrupt)
	})
	t.Run("head of another session", func(t *testing.T) {
		c, st, _ := setup(t)
		v := mustGetName(t, st, "session/s")
		require.NoError(t, st.Commit(ctx, []cas.NameOp{{Name: "session/t", Value: v}}, false))
		_, err := c.Head(ctx, "t")
		assert.ErrorIs(t, err, cas.ErrCorrupt)
	})
}

func mustGetName(t *testing.T, st cas.Names, name string) []byte {
	t.Helper()
	v, err := st.GetName(context.Background(), name)
	require.NoError(t, err)
	return v
}
