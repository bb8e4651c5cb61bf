// Package atomicfile replaces files durably, the one way every durable file
// of dshd is written (contributors, the token, transcript headers): a crash
// leaves either the old contents or the new, never a mix, and once Write
// returns the new contents and name survive a power loss.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
)

// TempPattern is the name pattern of Write's temporary files for path, in
// os.CreateTemp and filepath.Glob syntax alike: ".<base>.*.tmp". Callers
// remove leftovers of an interrupted Write with it.
func TempPattern(path string) string { return "." + filepath.Base(path) + ".*.tmp" }

// Options tune Write.
type Options struct {
	// Perm is the file's mode; 0 means 0600.
	Perm fs.FileMode
	// Sync makes a file's contents (or a directory's entries) durable; nil
	// means (*os.File).Sync. Tests replace it to observe or fail it.
	Sync func(*os.File) error
}

// Write replaces path with data: it creates a new temporary file in the same
// directory (O_EXCL, so no link is followed), sets its mode, writes data,
// fsyncs and closes it, renames it over path and fsyncs the directory. On
// error the temporary file is removed and path is unchanged. The directory
// must exist.
func Write(path string, data []byte, o Options) (err error) {
	perm, sync := o.Perm, o.Sync
	if perm == 0 {
		perm = 0o600
	}
	if sync == nil {
		sync = (*os.File).Sync
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, TempPattern(path))
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := sync(f); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return sync(d)
}
