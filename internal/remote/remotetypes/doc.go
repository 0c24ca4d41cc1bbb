// Package remotetypes holds the value types of package remote that cross
// the daemon's socket (a remote's Config and Encryption, a lease's
// Holder, the reports of a remote's sessions, fsck and gc), its limits
// and its errors. Package remote names each of them by an alias, so
// errors.Is and a type switch see one value either way.
//
// It imports no crypto, no compression and no object store client: the
// CLI links it (through internal/api) and so pays for none of the
// package initialisation of remote's dependencies at each call.
package remotetypes
