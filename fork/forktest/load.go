package forktest

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/manifest"
)

// LoadDir stores the directory tree at dir (files, directories, symlinks;
// modes kept, times zeroed so roots are reproducible) and returns its root.
func LoadDir(ctx context.Context, p cas.Putter, dir string) (cas.Ref, error) {
	files := map[string]manifest.Entry{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := uint32(info.Mode().Perm())
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			files[rel] = manifest.Entry{Kind: manifest.KindSymlink, Mode: 0o777, Size: int64(len(target)), Target: target}
		case d.IsDir():
			files[rel] = manifest.Entry{Kind: manifest.KindDir, Mode: mode}
		case d.Type().IsRegular():
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			e, _, err := fork.PutFile(ctx, p, f)
			if err != nil {
				return err
			}
			e.Mode = mode
			files[rel] = e
		}
		return nil
	})
	if err != nil {
		return cas.Ref{}, err
	}
	return manifest.BuildTree(ctx, p, files)
}
