// Package skills lists the local skills of a harness home: every
// <home>/skills/<name>/SKILL.md, described by its YAML front matter.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package skills

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"go.yaml.in/yaml/v3"
)

// Skill is one local skill.
type Skill struct {
	Name        string // front matter "name", else the directory name
	Description string // front matter "description"
	Path        string // absolute path of SKILL.md
}

// Dir lists the skills under one home.
type Dir struct {
	root string
}

// New returns the skills of home (which must be the resolved, absolute home).
func New(home string) *Dir {
	return &Dir{root: filepath.Join(home, "skills")}
}

// List returns the skills sorted by name. A missing skills directory is no
// skills; a SKILL.md whose front matter does not parse is listed with its
// directory name and an empty description rather than hiding the others.
func (d *Dir) List(ctx context.Context) ([]Skill, error) {
	paths, err := filepath.Glob(filepath.Join(d.root, "*", "SKILL.md"))
	if err != nil {
		return nil, fmt.Errorf("list skills: %w", err)
	}
	out := make([]Skill, 0, len(paths))
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read skill %s: %w", p, err)
		}
		s := Skill{Name: filepath.Base(filepath.Dir(p)), Path: p}
		var fm struct {
			Name        string `yaml:"name"`
			Description string `yaml:"description"`
		}
		if front, ok := frontMatter(data); ok && yaml.Unmarshal(front, &fm) == nil {
			if fm.Name != "" {
				s.Name = fm.Name
			}
			s.Description = fm.Description
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// frontMatter returns the YAML between a leading "---" line and the next one.
func frontMatter(data []byte) ([]byte, bool) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	rest, ok := cutLine(data, "---")
	if !ok {
		return nil, false
	}
	for off := 0; off < len(rest); {
		end := bytes.IndexByte(rest[off:], '\n')
		line := rest[off:]
		if end >= 0 {
			line = rest[off : off+end]
		}
		if string(bytes.TrimRight(line, "\r")) == "---" {
			return rest[:off], true
		}
		if end < 0 {
			break
		}
		off += end + 1
	}
	return nil, false
}

// cutLine removes a first line equal to want (CRLF tolerated).
func cutLine(data []byte, want string) ([]byte, bool) {
	line, rest, found := bytes.Cut(data, []byte("\n"))
	if !found || string(bytes.TrimRight(line, "\r")) != want {
		return nil, false
	}
	return rest, true
}
