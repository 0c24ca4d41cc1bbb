package s3

import (
	"errors"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

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

// TestProfileCredentialsFiles: which file and section a profile's keys
// come from.
func TestProfileCredentialsFiles(t *testing.T) {
	for _, c := range []struct {
		name        string
		cred, conf  string // "" leaves the file absent
		profile     string
		want        objstore.Credentials
		noneWanted  bool
		defaultPath bool // the files at ~/.aws, not named by the environment
	}{
		{name: "credentials file", cred: "[p]\naws_access_key_id=I\naws_secret_access_key=S\naws_session_token=T\n", profile: "p",
			want: objstore.Credentials{AccessKeyID: "I", SecretAccessKey: "S", SessionToken: "T"}},
		{name: "config file, profile section", conf: "[profile p]\naws_access_key_id = I\naws_secret_access_key = S\n", profile: "p",
			want: objstore.Credentials{AccessKeyID: "I", SecretAccessKey: "S"}},
		{name: "config file, default section", conf: "[default]\naws_access_key_id = I\naws_secret_access_key = S\n", profile: "default",
			want: objstore.Credentials{AccessKeyID: "I", SecretAccessKey: "S"}},
		{name: "config file, [profile default] wins over [default]", conf: "[profile default]\naws_access_key_id = P\naws_secret_access_key = PS\n[default]\naws_access_key_id = D\naws_secret_access_key = DS\n", profile: "default",
			want: objstore.Credentials{AccessKeyID: "P", SecretAccessKey: "PS"}},
		{name: "config file, section without the profile prefix", conf: "[p]\naws_access_key_id = I\naws_secret_access_key = S\n", profile: "p", noneWanted: true},
		{name: "credentials file, section with the profile prefix", cred: "[profile p]\naws_access_key_id = I\naws_secret_access_key = S\n", profile: "p", noneWanted: true},
		{name: "credentials file wins over config file",
			cred: "[p]\naws_access_key_id = CRED\naws_secret_access_key = CREDS\n",
			conf: "[profile p]\naws_access_key_id = CONF\naws_secret_access_key = CONFS\naws_session_token = CONFT\n", profile: "p",
			want: objstore.Credentials{AccessKeyID: "CRED", SecretAccessKey: "CREDS"}},
		{name: "config file when the credentials file has no keys for the profile",
			cred: "[p]\nregion = x\n[q]\naws_access_key_id = Q\naws_secret_access_key = QS\n",
			conf: "[profile p]\naws_access_key_id = CONF\naws_secret_access_key = CONFS\naws_session_token = CONFT\n", profile: "p",
			want: objstore.Credentials{AccessKeyID: "CONF", SecretAccessKey: "CONFS", SessionToken: "CONFT"}},
		{name: "id in one file, secret in the other", cred: "[p]\naws_access_key_id = I\n", conf: "[profile p]\naws_secret_access_key = S\n", profile: "p", noneWanted: true},
		{name: "id without secret", cred: "[p]\naws_access_key_id = I\n", profile: "p", noneWanted: true},
		{name: "other profile only", cred: "[q]\naws_access_key_id = I\naws_secret_access_key = S\n", profile: "p", noneWanted: true},
		{name: "default paths", defaultPath: true, cred: "[p]\naws_access_key_id = I\naws_secret_access_key = S\n", profile: "p",
			want: objstore.Credentials{AccessKeyID: "I", SecretAccessKey: "S"}},
		{name: "no files", profile: "p", noneWanted: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			credFile, confFile := isolate(t)
			if c.defaultPath {
				t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "")
				t.Setenv("AWS_CONFIG_FILE", "")
				home := os.Getenv("HOME")
				credFile, confFile = filepath.Join(home, ".aws", "credentials"), filepath.Join(home, ".aws", "config")
			}
			if c.cred != "" {
				write(t, credFile, c.cred)
			}
			if c.conf != "" {
				write(t, confFile, c.conf)
			}
			got, err := profileCredentials(c.profile)
			if c.noneWanted {
				if !errors.Is(err, objstore.ErrNoCredentials) {
					t.Fatalf("got %+v, %v; want ErrNoCredentials", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// TestProfileCredentialsUnreadable: a credentials file that cannot be
// read is no silent fallback to the config file.
func TestProfileCredentialsUnreadable(t *testing.T) {
	credFile, confFile := isolate(t)
	if err := os.Mkdir(credFile, 0o700); err != nil { // a directory reads as an error
		t.Fatal(err)
	}
	write(t, confFile, "[profile p]\naws_access_key_id = I\naws_secret_access_key = S\n")
	if _, err := profileCredentials("p"); !errors.Is(err, objstore.ErrNoCredentials) {
		t.Fatalf("unreadable credentials file: %v, want ErrNoCredentials", err)
	}
}

// TestProfileKeys: the INI dialect of the shared files.
func TestProfileKeys(t *testing.T) {
	for _, c := range []struct {
		name    string
		in      string
		profile string
		config  bool
		want    map[string]string
	}{
		{"plain", "[p]\nk=v\n", "p", false, map[string]string{"k": "v"}},
		{"whitespace around =", "[p]\nk \t=\t v  \n", "p", false, map[string]string{"k": "v"}},
		{"key case", "[p]\nAWS_Access_Key_ID = v\n", "p", false, map[string]string{"aws_access_key_id": "v"}},
		{"comment lines", "# c\n; c\n[p]\n  # c\nk = v\n; k = w\n", "p", false, map[string]string{"k": "v"}},
		{"inline comments", "[p] # c\nk = v # c\nl = w\t; c\n", "p", false, map[string]string{"k": "v", "l": "w"}},
		{"# without whitespace is value", "[p]\nk = a#b;c\n", "p", false, map[string]string{"k": "a#b;c"}},
		{"quotes", "[p]\nk = \"v w\"\nl = 'x'\nm = \"y'\n", "p", false, map[string]string{"k": "v w", "l": "x", "m": "\"y'"}},
		{"value with =", "[p]\nk = a=b\n", "p", false, map[string]string{"k": "a=b"}},
		{"last value wins", "[p]\nk = 1\n[q]\nk = 2\n[p]\nk = 3\n", "p", false, map[string]string{"k": "3"}},
		{"spaces in brackets", "[  p  ]\nk = v\n", "p", false, map[string]string{"k": "v"}},
		{"indented sub-property is skipped", "[p]\ns3 =\n  k = v\nk2 = w\n", "p", false, map[string]string{"s3": "", "k2": "w"}},
		{"indented properties", "[p]\n  k = v\n\tl = w\n", "p", false, map[string]string{"k": "v", "l": "w"}},
		{"colon", "[p]\nk: v\nl = a:b\n", "p", false, map[string]string{"k": "v", "l": "a:b"}},
		{"junk ignored", "[p]\nnot a property\nk = v\n= x\n[broken\n", "p", false, map[string]string{"k": "v"}},
		{"CRLF", "[p]\r\nk = v\r\n", "p", false, map[string]string{"k": "v"}},
		{"section ends at the next", "[p]\nk = v\n[q]\nl = w\n", "p", false, map[string]string{"k": "v"}},
		{"no such profile", "[q]\nk = v\n", "p", false, nil},
		{"credentials file ignores profile prefix", "[profile p]\nk = v\n", "p", false, nil},
		{"config needs profile prefix", "[p]\nk = v\n", "p", true, nil},
		{"config profile prefix", "[profile   p]\nk = v\n", "p", true, map[string]string{"k": "v"}},
		{"config default", "[default]\nk = v\n", "default", true, map[string]string{"k": "v"}},
		{"config other kinds", "[sso-session p]\nk = v\n", "p", true, nil},
		{"three words", "[profile p x]\nk = v\n", "p", true, nil},
	} {
		if got := profileKeys([]byte(c.in), c.profile, c.config); !maps.Equal(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

// FuzzProfileKeys: keys come out lower case, trimmed and without '=';
// values without line breaks; CRLF line ends read as LF; a trailing
// comment changes nothing; and what was read, written back as a section
// of plain properties, reads the same.
func FuzzProfileKeys(f *testing.F) {
	for _, s := range []string{
		"[default]\naws_access_key_id = AKID\naws_secret_access_key = SEKRIT\n",
		"[profile p] ; c\nk = \"v\" # c\n  sub = x\n[p]\nk=w",
		"[ a b ]\n=\n;\n#\n[\n]\nk",
	} {
		f.Add([]byte(s), "default", false)
		f.Add([]byte(s), "p", true)
	}
	f.Fuzz(func(t *testing.T, b []byte, profile string, config bool) {
		got := profileKeys(b, profile, config)
		for k, v := range got {
			if k == "" || k != strings.ToLower(k) || k != strings.TrimSpace(k) || strings.Contains(k, "=") {
				t.Fatalf("key %q", k)
			}
			if strings.ContainsAny(v, "\n") {
				t.Fatalf("value %q of %q holds a line break", v, k)
			}
		}
		if strings.ContainsRune(string(b), '\r') {
			return
		}
		if crlf := profileKeys([]byte(strings.ReplaceAll(string(b), "\n", "\r\n")), profile, config); !maps.Equal(got, crlf) {
			t.Fatalf("CRLF reads %q, LF %q", crlf, got)
		}
		if more := profileKeys(append(append([]byte{}, b...), "\n# comment\n"...), profile, config); !maps.Equal(got, more) {
			t.Fatalf("a trailing comment changes %q to %q", got, more)
		}
		if got == nil || profile == "" || strings.IndexFunc(profile, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune("[]#;", r) }) >= 0 {
			return
		}
		var sb strings.Builder
		sb.WriteString("[" + profile + "]\n")
		for k, v := range got {
			if v != strings.TrimSpace(v) || cutComment(" "+v) != " "+v || unquote(v) != v || strings.ContainsRune(v, '\r') {
				return
			}
			sb.WriteString(k + " = " + v + "\n")
		}
		if again := profileKeys([]byte(sb.String()), profile, false); !maps.Equal(got, again) {
			t.Fatalf("%q read back as %q", got, again)
		}
	})
}

// A service run without $HOME (systemd sets none for root) finds the
// shared files in its user's home, as the SDK does.
func TestSharedFileWithoutHome(t *testing.T) {
	u, err := user.Current()
	if err != nil || u.HomeDir == "" {
		t.Skipf("no home directory in the user database: %v", err)
	}
	t.Setenv("HOME", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "")
	if got, want := sharedFile("AWS_SHARED_CREDENTIALS_FILE", "credentials"), filepath.Join(u.HomeDir, ".aws", "credentials"); got != want {
		t.Errorf("sharedFile without $HOME: %q, want %q", got, want)
	}
}
