package remote

import (
	"fmt"
	"net/url"
	"strings"
)

// Config describes one remote. It holds no secrets (an encrypted
// remote's key is named by its source, never held), so it can be stored
// (remotes.json) and printed.
type Config struct {
	Name string `json:"name"`
	// URL is s3://BUCKET[/PREFIX].
	URL string `json:"url"`
	// Endpoint is the S3 endpoint URL (http://127.0.0.1:7070,
	// https://s3.eu-west-1.amazonaws.com); empty means AWS for Region.
	Endpoint string `json:"endpoint,omitempty"`
	// Region signs requests; empty means AWS_REGION or us-east-1.
	Region string `json:"region,omitempty"`
	// Profile selects a section of the shared credentials file, whose
	// keys then win over the environment's; empty means the environment's
	// keys, else AWS_PROFILE or "default".
	Profile string `json:"profile,omitempty"`
	// Encryption, when set, seals every object and hides their names
	// under a key from the named source (crypt.go).
	Encryption Encryption `json:"encryption,omitzero"`
}

// ParseURL splits s3://BUCKET/PREFIX into bucket and prefix (without
// slashes at either end).
func ParseURL(s string) (bucket, prefix string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("remote: url %q: %w", s, err)
	}
	if u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("remote: url %q: want s3://BUCKET[/PREFIX]", s)
	}
	prefix = strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	for _, part := range strings.Split(prefix, "/") {
		if prefix != "" && (part == "" || part == "." || part == "..") {
			return "", "", fmt.Errorf("remote: url %q: bad prefix segment %q", s, part)
		}
	}
	return u.Host, prefix, nil
}

// Validate checks the config without contacting the remote.
func (c Config) Validate() error {
	if c.Name == "" || strings.ContainsAny(c.Name, "/ \t\n") {
		return fmt.Errorf("remote: name %q: want a non-empty word without slashes or spaces", c.Name)
	}
	if _, _, err := ParseURL(c.URL); err != nil {
		return err
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("remote %s: endpoint %q: want http(s)://HOST[:PORT]", c.Name, c.Endpoint)
		}
	}
	return c.Encryption.validate(c.Name)
}
