package s3

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/config"

	"github.com/homefs/homefs/internal/remote/objstore"
)

// resolveCredentials finds the keys of the remote name: from profile, if
// the remote names one (an operator who named one means it, whatever the
// daemon's environment holds); else from the environment, then the shared
// files' AWS_PROFILE or "default" profile. It never reaches the network
// (no instance metadata), and the keys go only into request signing.
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

// profileCredentials reads the keys of profile from the shared
// credentials and config files.
func profileCredentials(profile string) (objstore.Credentials, error) {
	shared, err := config.LoadSharedConfigProfile(context.Background(), profile, func(o *config.LoadSharedConfigOptions) {
		if f := os.Getenv("AWS_SHARED_CREDENTIALS_FILE"); f != "" {
			o.CredentialsFiles = []string{f}
		}
		if f := os.Getenv("AWS_CONFIG_FILE"); f != "" {
			o.ConfigFiles = []string{f}
		}
	})
	if err != nil || !shared.Credentials.HasKeys() {
		return objstore.Credentials{}, objstore.ErrNoCredentials
	}
	c := shared.Credentials
	return objstore.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken}, nil
}
