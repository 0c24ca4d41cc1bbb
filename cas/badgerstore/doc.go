// Package badgerstore is homefs's disk store: a cas.Store in a Badger
// database directory, which only the daemon (and tests) open.
//
// Terms:
//   - The directory holds Badger's files and two of ours: a lock file
//     (homefs-cas.lock; one process, and one open Store, per directory, or
//     ErrLocked) and a space ballast (homefs-space.reserve).
//   - Keys: 'c' + the 32 bytes of a Ref for a chunk, whose value is its
//     stored form (package stored); 'n' + the name for a name. Nothing of
//     this, nor any Badger error, leaves the package.
//   - A Get reads the stored form, decodes it into a slice of its own and
//     re-hashes it; GetMany hashes two chunks at once where the CPU has the
//     SHA extensions (sum2, assembly written by sum2_amd64_gen.go).
//   - The space reserve: new data is refused with cas.ErrNoSpace while less
//     than it would be left on the filesystem, because Badger writes
//     through memory maps and a full disk there is SIGBUS, not ENOSPC
//     (space.go).
//   - Damage: Open first reads the logs and tables as Badger would
//     (CheckFiles) and refuses a store whose files Badger would cut short
//     or crash on (ErrDamaged), unless Options.Salvage.
//   - Compact rewrites the files that hold deleted chunks, so that deleted
//     bytes leave the disk.
package badgerstore
