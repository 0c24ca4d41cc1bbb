// Package s3test starts a real S3 server for tests: the Versity S3 Gateway
// (versitygw) with its posix backend in a temporary directory, listening on
// 127.0.0.1. The binary is found through HOMEFS_VERSITYGW, then PATH
// (scripts/install-versitygw.sh builds and prints it). Without it a test is
// skipped, unless CI is set, where it fails: CI must run these tests.
package s3test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/homefs/homefs/internal/remote/objstore"
)

// Test credentials of the gateway's root account. They exist only inside
// the temporary server.
const (
	AccessKey = "homefs-test"
	SecretKey = "homefs-test-secret"
)

// Server is a running gateway.
type Server struct {
	// Endpoint is http://127.0.0.1:PORT.
	Endpoint string
	// Dir is the posix backend's root: bucket B's object K is file Dir/B/K.
	Dir string

	t    testing.TB
	bin  string
	addr string
	meta string
	log  *os.File

	mu  sync.Mutex
	cmd *exec.Cmd // GUARDED_BY(mu); nil while stopped
}

// Binary returns the gateway's path, or "" if it cannot be found.
func Binary() string {
	if p := os.Getenv("HOMEFS_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		return ""
	}
	p, err := exec.LookPath("versitygw")
	if err != nil {
		return ""
	}
	return p
}

// Start runs a gateway for the test and stops it at cleanup. It skips the
// test when the binary is missing, or fails it when CI is set.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		msg := "versitygw not found: run scripts/install-versitygw.sh and export HOMEFS_VERSITYGW=<the path it prints>"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI is set: the remote tests must run)")
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	s := &Server{t: t, bin: bin, Dir: filepath.Join(dir, "data"), meta: filepath.Join(dir, "meta")}
	for _, d := range []string{s.Dir, s.meta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.log = log
	s.addr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.Endpoint = "http://" + s.addr
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			if b, err := os.ReadFile(log.Name()); err == nil && len(b) > 0 {
				t.Logf("versitygw log:\n%s", tail(b, 4000))
			}
		}
		log.Close()
	})
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	return s
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Restart starts the gateway again after Stop (on the same port and data).
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	cmd := exec.Command(s.bin, "--port", s.addr, "--quiet", "--keep-alive", "posix", "--sidecar", s.meta, s.Dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+AccessKey, "ROOT_SECRET_ACCESS_KEY="+SecretKey)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("s3test: start %s: %w", s.bin, err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("s3test: versitygw did not listen on %s within 15s", s.addr)
}

// Stop kills the gateway (as a crash would) and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill() // a frozen gateway dies of SIGKILL too
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Freeze stops the gateway with SIGSTOP: it keeps its port and its
// connections but answers nothing, as a hung server does, until Thaw.
func (s *Server) Freeze() {
	s.signal(syscall.SIGSTOP)
}

// Thaw continues a frozen gateway (SIGCONT).
func (s *Server) Thaw() {
	s.signal(syscall.SIGCONT)
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("s3test: %v to a stopped gateway", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("s3test: %v: %v", sig, err)
	}
}

// Silent listens on 127.0.0.1 for the test, accepts every connection and
// never answers nor closes one: a server that takes requests and hangs.
// It returns the endpoint, http://127.0.0.1:PORT.
func Silent(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// Credentials returns the gateway's test credentials.
func (s *Server) Credentials() *objstore.Credentials {
	return &objstore.Credentials{AccessKeyID: AccessKey, SecretAccessKey: SecretKey}
}

// Client returns a plain S3 client for the gateway (path-style).
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
	})
}

var bucketSeq struct {
	sync.Mutex
	n int
}

// Bucket creates a new empty bucket and returns its name.
func (s *Server) Bucket(t testing.TB) string {
	t.Helper()
	bucketSeq.Lock()
	bucketSeq.n++
	name := fmt.Sprintf("homefs-test-%d", bucketSeq.n)
	bucketSeq.Unlock()
	_, err := s.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)})
	if err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	return name
}

// ObjectPath returns the file that holds object key of bucket in the
// posix backend (for fault injection).
func (s *Server) ObjectPath(bucket, key string) string {
	return filepath.Join(s.Dir, bucket, filepath.FromSlash(key))
}

// TestKey is the encryption key of the remotes the tests make with
// encryption (64 hex digits). Like AccessKey, it guards nothing but test
// data.
const TestKey = "a3c1f0e29b8d47566e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d"

// KeyEnv is the variable that holds TestKey in the environment of the
// end-to-end tests' daemons.
const KeyEnv = "HOMEFS_TEST_REMOTE_KEY"

// Encrypted reports whether the remote tests run against encrypted
// remotes: HOMEFS_TEST_ENCRYPT set to anything but "" runs the suites
// that use KeyFile (and the end-to-end tests' remote add) encrypted.
func Encrypted() bool { return os.Getenv("HOMEFS_TEST_ENCRYPT") != "" }

// KeyFile returns a new file holding TestKey when Encrypted, else "": a
// remote.Encryption's KeyFile, which is plain when empty.
func KeyFile(t testing.TB) string {
	t.Helper()
	if !Encrypted() {
		return ""
	}
	return WriteKeyFile(t, TestKey)
}

// WriteKeyFile writes key to a new file of mode 0600 and returns its path.
func WriteKeyFile(t testing.TB, key string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "remote.key")
	if err := os.WriteFile(p, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
