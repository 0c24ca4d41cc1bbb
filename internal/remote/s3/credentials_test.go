package s3

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homefs/homefs/internal/remote/objstore"
)

// isolate points the credential lookup at files in a new directory (none
// of which exist yet) and clears the environment's keys.
func isolate(t *testing.T) (credFile, confFile string) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
	credFile, confFile = filepath.Join(dir, "credentials"), filepath.Join(dir, "config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", credFile)
	t.Setenv("AWS_CONFIG_FILE", confFile)
	return credFile, confFile
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestResolveCredentials: the environment's keys, else the shared files'
// AWS_PROFILE or default profile; a profile the remote names wins over
// the environment (and AWS_PROFILE), and one without keys is an error,
// never the environment's keys instead.
func TestResolveCredentials(t *testing.T) {
	credFile, _ := isolate(t)
	if _, err := resolveCredentials("r", ""); !errors.Is(err, objstore.ErrNoCredentials) {
		t.Fatalf("no keys anywhere: %v", err)
	}
	write(t, credFile, "[default]\naws_access_key_id = AKID\naws_secret_access_key = SEKRIT\n")
	if c, err := resolveCredentials("r", ""); err != nil || c.AccessKeyID != "AKID" || c.SecretAccessKey != "SEKRIT" {
		t.Fatalf("credentials from file: %+v %v", c, err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "ENVID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
	t.Setenv("AWS_SESSION_TOKEN", "ENVTOKEN")
	if c, _ := resolveCredentials("r", ""); c != (objstore.Credentials{AccessKeyID: "ENVID", SecretAccessKey: "ENVSECRET", SessionToken: "ENVTOKEN"}) {
		t.Fatalf("environment does not win over the file: %+v", c)
	}

	write(t, credFile, "[default]\naws_access_key_id = AKID\naws_secret_access_key = SEKRIT\n"+
		"[fleet]\naws_access_key_id = FLEETID\naws_secret_access_key = FLEETSECRET\n")
	t.Setenv("AWS_PROFILE", "default")
	if c, _ := resolveCredentials("r", "fleet"); c.AccessKeyID != "FLEETID" || c.SessionToken != "" {
		t.Fatalf("profile fleet with keys in the environment: %+v, want the profile's", c)
	}
	_, err := resolveCredentials("r", "nowhere")
	if !errors.Is(err, objstore.ErrNoCredentials) || !strings.Contains(err.Error(), `remote r: profile "nowhere"`) {
		t.Fatalf("a named profile without keys: %v, want ErrNoCredentials naming it", err)
	}

	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_PROFILE", "fleet")
	if c, _ := resolveCredentials("r", ""); c.AccessKeyID != "FLEETID" {
		t.Fatalf("AWS_PROFILE=fleet without keys in the environment: %+v", c)
	}
}
