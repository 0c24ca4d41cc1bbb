// Package s3 is the object store of a remote reached through the S3 API
// (path-style addressing, any endpoint: AWS, MinIO, Ceph RGW, R2,
// Versity): an objstore.Store over the AWS SDK, with our own transport
// (transport.go), retries (retry.go) and credentials (credentials.go).
// It is the only production package of homefs that links the SDK (s3test,
// the test server, is the other); the daemon opens
// remotes with Open (remote.Options.Open).
package s3
