package files

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// CheckWritable reports whether the agent's policy lets it write p (Abs):
// the error a write of p would meet for its place (ErrHidden,
// ErrNotWritable, ErrProtected, ErrInvalidPath), nil when there is none.
// Links on the way are decided when the write happens, not here: a
// caller checks every path of a change first, so that a refused one
// stops it before anything was written.
func (s *Scope) CheckWritable(p string) error {
	abs, err := s.Abs(p)
	if err != nil {
		return err
	}
	root, relp, err := s.writable(abs)
	if err != nil {
		return err
	}
	unix.Close(root)
	if relp == "." {
		return fmt.Errorf("write %s: %w: a writable root itself", abs, ErrInvalidPath)
	}
	return nil
}
