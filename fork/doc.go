// Package fork binds provider sessions between homefs sessions, and reads
// and writes the native snapshot format of the TypeScript harness.
//
// Terms:
//
//   - A provider is an agent harness (Codex, Claude Code, Pi, …) whose home
//     directory sits at a fixed path inside a homefs session (its Home).
//   - A rollout is the JSON-lines file in which a provider records one
//     provider session; its first record names the provider session id
//     (its identity). A rollout is damaged when one of its lines is not a
//     JSON object.
//   - Binding copies a provider session from a SOURCE homefs session into a
//     TARGET one by reference: the target's entry names the source's
//     chunks, so no rollout byte is copied. For Codex the ancestors a child
//     was forked from (forked_from_id) come along.
//   - Reconcile decides what binding does with what the target already has:
//     identical or longer (the source is a prefix of it) is kept, a strict
//     prefix of the source is replaced, anything else diverges and is
//     refused.
//   - The native format is the TypeScript harness's snapshot: a JSON file
//     naming blobs by SHA-256 under blobs/ in a directory.
//
// The package talks to sessions only through the Env interface (the lead's
// fusefs.Engine implements it; forktest.MemEnv does in memory), so it holds
// no FUSE and no CLI code.
package fork
