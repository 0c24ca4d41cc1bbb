// Package remote is homefs's remote tier: an S3-compatible bucket that
// holds chunks, manifest nodes, snapshot records and session heads, so that
// a session captured on one host can be pulled and resumed on another.
//
// Terms:
//
//   - A remote is one bucket and key prefix reached through the S3 API
//     (path-style addressing, any endpoint: AWS, MinIO, Ceph RGW, R2,
//     Versity). Its layout under PREFIX/:
//
//     chunks/<hex>      a chunk or manifest node in its cas stored form,
//     named by the hex of its ref, verified by hash on every read
//     snapshots/<id>    a snapshot record (canonical JSON), named by its id
//     heads/<session>   the session's remote head (JSON: the last
//     snapshot pushed), changed only by conditional puts
//     leases/<session>  the session's lease (JSON: holder, token,
//     expiry), changed only by conditional puts
//     locks/<kind>-<id> a push's or a gc's lock (lock.go)
//
//   - Push uploads what the remote lacks, children before parents: a tree
//     or index node present on the remote implies its whole subtree is
//     there, so a push skips it. Records go after their trees and after
//     their Parent and Origin records; a record present on the remote
//     therefore implies its tree and its lineage are complete. That write
//     is the durability barrier. The head is moved last, only forward along
//     lineage and only if it still holds the ETag read before
//     (If-Match / If-None-Match: *); anything else is ErrConflict, found
//     before anything is uploaded. Pushes through one Remote share their
//     uploads: an object is sent once however many of them need it
//     (uploads.go).
//
//   - Pull fetches a record, its lineage and their tree and index nodes
//     into the local store and registers them in the local catalog; file
//     chunks come later, on first read, through ReadThrough (or at once,
//     with PullOptions.All).
//
//   - A lease names the host (Holder) that works on a session until an
//     expiry; Acquire refuses a live lease of another holder (ErrLeased),
//     Renew extends one while its token is unchanged, Release marks it
//     released. Expiry is judged by the reader's clock.
//
//   - Forget and Purge delete records (and a session's head); GC deletes
//     every record and chunk no head reaches. A push holds a push lock and
//     a gc a gc lock; each writes its own and then lists the others', so
//     a gc never deletes what a push in progress found present and
//     skipped (docs/ARCHITECTURE-remote.md).
//
//   - Fsck reads back, and checks as a pull does, every record, node and
//     chunk the heads reach, and reports each missing or damaged object
//     with its key and what reaches it. A push with PushOptions.Repair
//     reads objects back instead of asking whether they exist, and
//     uploads again what is missing or damaged, in a push's order.
//
//   - ReadThrough is a cas.Store that serves local chunks and fetches
//     missing ones from remotes, checking each one's hash before storing
//     and returning it, and reading ahead along the files of pulled trees.
//
//   - An encrypted remote (Config.Encryption) seals every object with
//     AES-256-GCM under a key from a file, the daemon's environment or a
//     command, binds each to its name, and names chunks, records, heads
//     and leases by an HMAC of their plain names; PREFIX/keycheck makes a
//     wrong key fail at first use (ErrWrongKey). See crypt.go.
//
//   - Every request is bounded (Timeouts: connect, idle connection,
//     attempt) and retried, with jittered backoff, for a budget of time
//     that outlasts a server restart. A remote that stays silent or down
//     fails the operation with a network error (*net.OpError, ErrStalled
//     for silence), never a hang.
//
//   - The engine reaches the bucket through an objstore.Store, opened by
//     Options.Open (s3.Open, in package remote/s3, the only one that links
//     the AWS SDK); bounds, retries and request counts (Stats) are the
//     store's. This package, and a CLI that imports it for Config,
//     Encryption and the lease TTLs, link no AWS package.
//
// Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the
// shared credentials and config files (read by package remote/s3, not by
// the SDK); they are never logged or stored.
package remote
