// Package catalog is the durable list of sessions and snapshots.
//
// A session is a named, mutable working tree; its head is a small JSON
// record in the store's Names namespace. A snapshot is an immutable
// manifest.Snapshot record stored as a CAS object; its id is the hex of that
// object's ref, so the id pins both the record and, through Root, the tree.
//
// Names layout:
//
//	session/<name>   the session's Head (JSON, see EncodeHead)
//	snapshot/<id>    the name of the session that captured snapshot <id>
//
// The snapshot index makes snapshots enumerable and lets a unique prefix of
// at least MinPrefixLen hex digits stand for an id. It is also what keeps
// a snapshot: Reachable (gc's mark) starts from heads and index entries
// and never follows lineage links, so forgetting a snapshot (Forget,
// ForgetPolicy with restic's keep rules, Purge of a whole session) removes
// only its index entry, and gc then drops its record and whatever of its
// tree nothing else reaches. A head's own snapshot is never forgotten.
// Records are immutable, so a Parent or Origin may name a forgotten
// snapshot: the link dangles, and Log shows a gap. "A session's
// snapshots" are those indexed for it: a fork's head holds its own root,
// never its origin's record, so purging a session forgets snapshots that
// other sessions were forked from, and the forks keep working. Deleting a
// session without purging removes only its head; its snapshots stay
// listed and can still be forked.
//
// Atomicity and durability:
//
//   - Every change to a head is one Names.Commit that expects the head bytes
//     read before it (optimistic concurrency). Losing the race yields
//     ErrConflict, which wraps cas.ErrConflict; Gen counts the changes.
//   - Creating a session or forking expects the name to be absent, so of two
//     concurrent creators exactly one wins and the other gets ErrExists.
//   - Capture puts the snapshot record, then in one durable commit writes
//     snapshot/<id> and the new head: a crash leaves both or neither (at
//     worst an unreferenced record, which gc removes).
//   - Forget deletes index entries in batches, each one durable commit
//     that expects every entry still indexed for its session and the
//     head of each owning session unchanged: a restore racing it (the
//     only way a head comes to name an existing snapshot) makes it retry
//     and refuse, and a capture racing it is unaffected (its parent is
//     the head, which is never forgotten).
//   - Every commit that points a head or an index entry at CAS objects is
//     preceded by a store Sync when it is durable, so a durable name never
//     refers to chunks a crash could lose. Callers must have put the tree
//     under a root before passing that root in.
//
// All operations cost O(1) in the size of the trees involved, except
// VerifyComplete and Reachable, which walk trees.
package catalog
