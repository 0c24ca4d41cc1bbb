// Package objstore is the contract between the remote engine (package
// remote) and the object store that holds a remote's objects (package
// remote/s3): the operations a Store offers, the errors it reports, and
// the bounds on its requests. It needs nothing beyond the standard
// library, so that the engine, and the CLI that imports its types, link
// no store client.
//
// A Store makes each call whole: it bounds every attempt, retries
// transient failures within Timeouts.RetryTotal, and counts its requests
// (Stats). Its errors say which remote and key failed; the conditions
// callers branch on wrap the sentinels below.
package objstore
