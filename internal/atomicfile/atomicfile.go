package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Write writes data to path through a synced temporary file in the same
// directory and a rename, then syncs the directory, so that after a crash
// or a power loss path holds either its old content (or is absent, if it
// was) or all of data. An error of any step, the directory's sync
// included, is returned: until Write returns nil nothing may rely on the
// new content surviving a power loss.
func Write(path string, data []byte) error {
	return WriteFrom(path, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// WriteFrom is Write of what fill writes to the temporary file (which it
// may also read back, or truncate and write again). An error from fill
// leaves path as it was and is returned as it is.
func WriteFrom(path string, fill func(f *os.File) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: create a temporary file: %w", path, err)
	}
	tmp := f.Name()
	if err := fill(f); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return err
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs the directory dir, which makes the creation, renaming and
// removal of the entries in it durable.
func SyncDir(dir string) error {
	if err := Sync(dir); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// Sync fsyncs the file or directory at path.
func Sync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// MkdirAll makes dir and every missing directory above it, like
// os.MkdirAll, and makes what it created durable: it syncs the directory
// each new one was made in, so that once it returns a power loss takes
// none of them away. A dir that exists already is left as it is.
func MkdirAll(dir string, perm fs.FileMode) error {
	dir = filepath.Clean(dir)
	var missing []string // the directories to make, dir first
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("make directory %s: %s is not a directory", dir, p)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("make directory %s: %w", dir, err)
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("make directory %s: %w", dir, err)
	}
	// The topmost new directory first: each sync then makes the next
	// one's entry durable, down to dir's own.
	for i := len(missing) - 1; i >= 0; i-- {
		if err := SyncDir(filepath.Dir(missing[i])); err != nil {
			return fmt.Errorf("make directory %s: %w", dir, err)
		}
	}
	return nil
}
