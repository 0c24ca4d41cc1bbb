package s3

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/homefs/homefs/internal/remote/objstore"
)

// resolveCredentials finds the keys of the remote name: from profile, if
// the remote names one (an operator who named one means it, whatever the
// daemon's environment holds); else from the environment, then the shared
// files' AWS_PROFILE or "default" profile. It never reaches the network
// (no instance metadata, no SSO), and the keys go only into request
// signing.
func resolveCredentials(name, profile string) (objstore.Credentials, error) {
	if profile == "" {
		id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		if id != "" && secret != "" {
			return objstore.Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: os.Getenv("AWS_SESSION_TOKEN")}, nil
		}
		if profile = os.Getenv("AWS_PROFILE"); profile == "" {
			profile = "default"
		}
	}
	creds, err := profileCredentials(profile)
	if err != nil {
		return objstore.Credentials{}, fmt.Errorf("remote %s: profile %q: %w", name, profile, err)
	}
	return creds, nil
}

// profileCredentials reads profile's static keys from the shared
// credentials file (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials),
// section [NAME], or else the shared config file (AWS_CONFIG_FILE, else
// ~/.aws/config), section [profile NAME] (or [default]). The keys go
// together: a credentials file whose section holds a key id or a secret
// wins, with its session token, over the config file, and a key id
// without its secret is no credentials (as the SDK's reader says too).
// Missing files are no error; a profile without keys wraps
// objstore.ErrNoCredentials.
func profileCredentials(profile string) (objstore.Credentials, error) {
	var found objstore.Credentials
	for _, f := range []struct {
		path   string
		config bool
	}{{sharedFile("AWS_SHARED_CREDENTIALS_FILE", "credentials"), false}, {sharedFile("AWS_CONFIG_FILE", "config"), true}} {
		if f.path == "" {
			continue
		}
		b, err := os.ReadFile(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return objstore.Credentials{}, fmt.Errorf("%w: %w", objstore.ErrNoCredentials, err)
		}
		keys := profileKeys(b, profile, f.config)
		found = objstore.Credentials{
			AccessKeyID:     keys["aws_access_key_id"],
			SecretAccessKey: keys["aws_secret_access_key"],
			SessionToken:    keys["aws_session_token"],
		}
		if found.AccessKeyID != "" || found.SecretAccessKey != "" {
			break
		}
	}
	if found.AccessKeyID == "" || found.SecretAccessKey == "" {
		return objstore.Credentials{}, objstore.ErrNoCredentials
	}
	return found, nil
}

// sharedFile is the path the environment variable env names, else
// ~/.aws/name ("" without a home directory).
func sharedFile(env, name string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		// No $HOME (a system service): the user's entry, as the SDK does.
		u, err := user.Current()
		if err != nil || u.HomeDir == "" {
			return ""
		}
		home = u.HomeDir
	}
	return filepath.Join(home, ".aws", name)
}

// profileKeys returns the properties of profile in an INI file in the
// AWS shared file format, keys in lower case; a key set twice keeps its
// last value. In a config file (config) the profile's section is
// [profile NAME], or [default] for "default" ([profile default] wins over
// it); in a credentials file it is [NAME]. Blank lines, lines that start
// with # or ;, and the rest of a line after whitespace and # or ; are
// comments. As in the SDK's reader, a property is KEY = VALUE or
// KEY: VALUE; an indented line is a property of its own at the start of
// a section or after a property with a value, and otherwise belongs to
// the property above it (a sub-property, as under "s3 =", which no key we
// read uses) and is skipped; a line that is neither a section nor a
// property is ignored. A value in matching quotes loses them.
func profileKeys(b []byte, profile string, config bool) map[string]string {
	var (
		plain, prefixed map[string]string // [default] and [profile default] of a config file
		cur             map[string]string // the section being read, nil if not profile's
		// open: the section's last property has an empty value, so an
		// indented line below it is a sub-property of it.
		open bool
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || trimmed[0] == '#' || trimmed[0] == ';' {
			continue
		}
		if trimmed[0] == '[' {
			cur, open = nil, false
			kind, name, ok := sectionName(trimmed)
			if !ok || name != profile {
				continue
			}
			switch {
			case !config && kind == "":
				cur = ensure(&plain)
			case config && kind == "profile":
				cur = ensure(&prefixed)
			case config && kind == "" && name == "default":
				cur = ensure(&plain)
			}
			continue
		}
		indented := line[0] == ' ' || line[0] == '\t'
		if cur == nil || indented && open {
			continue
		}
		k, v, ok := splitProperty(cutComment(line))
		if !ok {
			continue
		}
		cur[k] = v
		open = v == ""
	}
	if prefixed != nil {
		return prefixed
	}
	return plain
}

// splitProperty splits "KEY = VALUE" or "KEY: VALUE" at the first = or
// :, the key in lower case.
func splitProperty(line string) (key, value string, ok bool) {
	i := strings.IndexAny(line, "=:")
	if i < 0 {
		return "", "", false
	}
	key = strings.ToLower(strings.TrimSpace(line[:i]))
	if key == "" {
		return "", "", false
	}
	return key, unquote(strings.TrimSpace(line[i+1:])), true
}

func ensure(m *map[string]string) map[string]string {
	if *m == nil {
		*m = map[string]string{}
	}
	return *m
}

// sectionName splits a section line "[ KIND NAME ] ; comment" into
// KIND ("" when the brackets hold one word) and NAME.
func sectionName(line string) (kind, name string, ok bool) {
	if i := strings.IndexAny(line, "#;"); i >= 0 {
		line = strings.TrimSpace(line[:i])
	}
	if len(line) < 2 || line[0] != '[' || line[len(line)-1] != ']' {
		return "", "", false
	}
	fields := strings.Fields(line[1 : len(line)-1])
	switch len(fields) {
	case 1:
		return "", fields[0], true
	case 2:
		return fields[0], fields[1], true
	}
	return "", "", false
}

// cutComment drops a comment that follows whitespace.
func cutComment(line string) string {
	for i := 1; i < len(line); i++ {
		if (line[i] == '#' || line[i] == ';') && (line[i-1] == ' ' || line[i-1] == '\t') {
			return line[:i]
		}
	}
	return line
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}
