package remote

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// ErrNoCredentials is returned when neither the environment nor a
// credentials file holds keys for the remote.
var ErrNoCredentials = errors.New("remote: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or write them to a shared credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials)")

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

func (c Config) region() string {
	if c.Region != "" {
		return c.Region
	}
	if r := os.Getenv("AWS_REGION"); r != "" {
		return r
	}
	if r := os.Getenv("AWS_DEFAULT_REGION"); r != "" {
		return r
	}
	return "us-east-1"
}

// credentialsFor resolves keys: from the profile the remote names, if
// any (an operator who named one means it, whatever the daemon's
// environment holds); else from the environment, then the shared
// credentials file's AWS_PROFILE or "default" profile. It never reaches
// the network (no instance metadata), and the keys go only into request
// signing.
func credentialsFor(ctx context.Context, c Config) (aws.CredentialsProvider, error) {
	if c.Profile != "" {
		return profileCredentials(ctx, c.Name, c.Profile)
	}
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if id != "" && secret != "" {
		return credentials.NewStaticCredentialsProvider(id, secret, os.Getenv("AWS_SESSION_TOKEN")), nil
	}
	profile := os.Getenv("AWS_PROFILE")
	if profile == "" {
		profile = "default"
	}
	return profileCredentials(ctx, c.Name, profile)
}

// profileCredentials reads the keys of profile from the shared
// credentials and config files.
func profileCredentials(ctx context.Context, name, profile string) (aws.CredentialsProvider, error) {
	shared, err := config.LoadSharedConfigProfile(ctx, profile, func(o *config.LoadSharedConfigOptions) {
		if f := os.Getenv("AWS_SHARED_CREDENTIALS_FILE"); f != "" {
			o.CredentialsFiles = []string{f}
		}
		if f := os.Getenv("AWS_CONFIG_FILE"); f != "" {
			o.ConfigFiles = []string{f}
		}
	})
	if err != nil || !shared.Credentials.HasKeys() {
		return nil, fmt.Errorf("remote %s: profile %q: %w", name, profile, ErrNoCredentials)
	}
	creds := shared.Credentials
	return credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken), nil
}
