package shellenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/dshd/dshd/internal/atomicfile"
)

// stateVersion is the version of the durable contributors file.
const stateVersion = 1

// stateFile is the JSON form of the durable contributors file.
type stateFile struct {
	Version      int                `json:"version"`
	Contributors []stateContributor `json:"contributors"`
}

type stateContributor struct {
	Name      string        `json:"name"`
	Keys      []stateKey    `json:"keys"`
	Resolver  stateResolver `json:"resolver"`
	CreatedAt time.Time     `json:"createdAt"`
}

type stateKey struct {
	Key         string `json:"key"`
	Description string `json:"description"`
}

type stateResolver struct {
	Kind      string            `json:"kind"`
	Values    map[string]string `json:"values,omitempty"`
	URL       string            `json:"url,omitempty"`
	TimeoutMs int64             `json:"timeoutMs,omitempty"`
}

// toStateContributor is c as the contributors file and the shared
// registry store it.
func toStateContributor(c Contributor) stateContributor {
	sc := stateContributor{
		Name: c.Name, CreatedAt: c.CreatedAt,
		Resolver: stateResolver{
			Kind: c.Resolver.Kind, Values: c.Resolver.Values, URL: c.Resolver.URL,
			TimeoutMs: c.Resolver.Timeout.Milliseconds(),
		},
	}
	for _, k := range c.Keys {
		sc.Keys = append(sc.Keys, stateKey(k))
	}
	return sc
}

// spec is the declaration sc stores, under plugin ("" for a durable
// contributor), to be compiled again.
func (sc stateContributor) spec(plugin string) Spec {
	s := Spec{
		Name: sc.Name, Plugin: plugin,
		Resolver: ResolverSpec{
			Kind: sc.Resolver.Kind, Values: sc.Resolver.Values, URL: sc.Resolver.URL,
			Timeout: time.Duration(sc.Resolver.TimeoutMs) * time.Millisecond,
		},
	}
	for _, k := range sc.Keys {
		s.Keys = append(s.Keys, KeySpec(k))
	}
	return s
}

// encodeState returns the durable contributors of s as file contents:
// every contributor that is neither built-in nor under a plugin.
func encodeState(s *snapshot) ([]byte, error) {
	st := stateFile{Version: stateVersion, Contributors: []stateContributor{}}
	for _, e := range s.entries {
		c := e.pub
		if c.Builtin || c.Plugin != "" {
			continue
		}
		st.Contributors = append(st.Contributors, toStateContributor(c))
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// loadState reads the durable contributors at path and returns their
// entries. A missing file yields none. Anything unreadable, malformed or
// inconsistent is an error naming the file.
func loadState(path string) ([]*entry, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read contributors file: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("contributors file %s is corrupt: %w", path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("contributors file %s has version %d, want %d", path, st.Version, stateVersion)
	}
	var entries []*entry
	names := map[string]bool{}
	owners := map[string]string{}
	for i, sc := range st.Contributors {
		cp, problems, onlyReserved := compileSpec(sc.spec(""))
		if len(problems) > 0 {
			de := &DeclarationError{Problems: problems}
			if onlyReserved {
				de.Err = ErrReservedKey
			}
			return nil, fmt.Errorf("contributors file %s: contributor %d (%q): %w", path, i, sc.Name, de)
		}
		if names[sc.Name] {
			return nil, fmt.Errorf("contributors file %s: contributor %q: %w", path, sc.Name, ErrDuplicateContributor)
		}
		names[sc.Name] = true
		for _, k := range cp.c.Keys {
			if o, ok := owners[k.Key]; ok {
				return nil, fmt.Errorf("contributors file %s: contributor %q: %w", path, sc.Name, &KeyOwnedError{Key: k.Key, Owner: o})
			}
			owners[k.Key] = sc.Name
		}
		cp.c.CreatedAt = sc.CreatedAt
		entries = append(entries, newEntry(cp.c, cp.templates))
	}
	return entries, nil
}

// removeStaleTemps removes the temporary files writeFileAtomic leaves
// behind when the process dies between creating and renaming one. Only
// regular files are removed: a symlink or directory of that name is left
// alone and reported.
func removeStaleTemps(path string, log *slog.Logger) {
	dir := filepath.Dir(path)
	matches, err := filepath.Glob(filepath.Join(dir, atomicfile.TempPattern(path)))
	if err != nil {
		return // the pattern is well formed; Glob ignores I/O errors
	}
	for _, m := range matches {
		fi, err := os.Lstat(m)
		if err != nil || !fi.Mode().IsRegular() {
			log.Warn("leaving a non-regular file that looks like a temporary contributors file", "path", m)
			continue
		}
		if err := os.Remove(m); err != nil {
			log.Warn("remove leftover temporary contributors file", "path", m, "err", err)
			continue
		}
		log.Info("removed leftover temporary contributors file", "path", m)
	}
}

// writeFileAtomic replaces path with data durably (atomicfile.Write),
// creating a missing directory with mode 0700.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data, atomicfile.Options{Perm: perm})
}
