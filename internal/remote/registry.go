package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/homefs/homefs/internal/atomicfile"
)

// RegistryFile is the registry's file name in a daemon's root.
const RegistryFile = "remotes.json"

// Registry is the list of configured remotes, kept as JSON in one file
// (the daemon's <root>/remotes.json). It holds names, URLs and endpoints,
// never credentials. Writes are durable: temporary file, fsync, rename,
// fsync of the directory.
type Registry struct {
	path string

	mu      sync.Mutex
	remotes []Config // sorted by name; GUARDED_BY(mu)
}

type registryFile struct {
	Version int      `json:"version"`
	Remotes []Config `json:"remotes"`
}

// LoadRegistry reads the registry at path; a missing file is an empty
// registry.
func LoadRegistry(path string) (*Registry, error) {
	reg := &Registry{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return reg, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remote: registry: %w", err)
	}
	var f registryFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("remote: registry %s: %w", path, err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("remote: registry %s: version %d, want 1", path, f.Version)
	}
	for _, c := range f.Remotes {
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("remote: registry %s: %w", path, err)
		}
	}
	reg.remotes = f.Remotes
	return reg, nil
}

// List returns the configured remotes, by name.
func (g *Registry) List() []Config {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.remotes)
}

// Get returns the remote called name. With name "" it returns the only
// remote, if exactly one is configured.
func (g *Registry) Get(name string) (Config, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if name == "" {
		switch len(g.remotes) {
		case 0:
			return Config{}, fmt.Errorf("%w: none configured (homefs remote add NAME s3://BUCKET/PREFIX --endpoint URL)", ErrNoRemote)
		case 1:
			return g.remotes[0], nil
		}
		names := make([]string, len(g.remotes))
		for i, c := range g.remotes {
			names[i] = c.Name
		}
		return Config{}, fmt.Errorf("%w: several are configured (%s): name one", ErrNoRemote, strings.Join(names, ", "))
	}
	for _, c := range g.remotes {
		if c.Name == name {
			return c, nil
		}
	}
	return Config{}, fmt.Errorf("%w: %q", ErrNoRemote, name)
}

// Add configures a new remote and saves the registry.
func (g *Registry) Add(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, have := range g.remotes {
		if have.Name == c.Name {
			return fmt.Errorf("%w: %q", ErrRemoteExists, c.Name)
		}
	}
	next := append(slices.Clone(g.remotes), c)
	slices.SortFunc(next, func(a, b Config) int { return strings.Compare(a.Name, b.Name) })
	if err := g.save(next); err != nil {
		return err
	}
	g.remotes = next
	return nil
}

// Remove forgets the remote called name and saves the registry. Nothing on
// the remote is touched.
func (g *Registry) Remove(name string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.IndexFunc(g.remotes, func(c Config) bool { return c.Name == name })
	if i < 0 {
		return fmt.Errorf("%w: %q", ErrNoRemote, name)
	}
	next := slices.Delete(slices.Clone(g.remotes), i, i+1)
	if err := g.save(next); err != nil {
		return err
	}
	g.remotes = next
	return nil
}

// save writes remotes durably. Called with mu held.
func (g *Registry) save(remotes []Config) error {
	if remotes == nil {
		remotes = []Config{}
	}
	b, err := json.MarshalIndent(registryFile{Version: 1, Remotes: remotes}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(g.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("remote: registry: %w", err)
	}
	return nil
}
