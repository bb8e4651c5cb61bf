package shellenv

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrHomeConflict is returned by ResolveHome when an explicit home and the
// config key skills.local.dshHome resolve to different directories.
var ErrHomeConflict = errors.New("shellenv: conflicting home directories")

// ErrInvalidHome is returned by ResolveHome when a home cannot be made
// absolute: "~" is used without a user home directory, or a relative path is
// given without a working directory.
var ErrInvalidHome = errors.New("shellenv: invalid home directory")

// HomeInput holds every source of the dshd home directory. ResolveHome reads
// nothing else: no environment, no process working directory.
type HomeInput struct {
	Flag        string // --home flag ("" = not given)
	Config      string // config dshHome ("" = not given)
	SkillsLocal string // config skills.local.dshHome ("" = not given)
	Ambient     string // $DSH_HOME of the server's environment (blank or whitespace = not given)
	UserHome    string // os.UserHomeDir() result, used for "~" and the ~/.dsh default
	Cwd         string // base for relative paths
}

// Source names used in ResolveHome errors.
const (
	homeKeyFlag   = "--home"
	homeKeyConfig = "dshHome"
	homeKeySkills = "skills.local.dshHome"
	homeKeyEnv    = "$" + KeyHome
)

// ResolveHome resolves the one dshd home directory
// (docs/design.md#invariants, invariant 10): the explicit home (Flag, else Config) wins over a non-blank Ambient, which
// wins over UserHome/.dsh. A leading "~" or "~/" is replaced by UserHome
// ("~user" forms are not expanded); a relative path is joined to Cwd; the
// result is cleaned. Symbolic links are not evaluated.
//
// When SkillsLocal is given alone it acts as the explicit home, so one value
// reaches everything. When both an explicit home and SkillsLocal are given and
// resolve to different directories, ResolveHome returns an error wrapping
// ErrHomeConflict that names both keys and both resolved paths. It returns an
// error wrapping ErrInvalidHome when a path cannot be made absolute.
func ResolveHome(in HomeInput) (string, error) {
	given := func(s string) bool { return strings.TrimSpace(s) != "" }

	explicitKey, explicit := "", ""
	switch {
	case given(in.Flag):
		explicitKey, explicit = homeKeyFlag, in.Flag
	case given(in.Config):
		explicitKey, explicit = homeKeyConfig, in.Config
	}

	if given(in.SkillsLocal) {
		skills, err := absHome(homeKeySkills, in.SkillsLocal, in)
		if err != nil {
			return "", err
		}
		if explicitKey == "" {
			return skills, nil
		}
		home, err := absHome(explicitKey, explicit, in)
		if err != nil {
			return "", err
		}
		if home != skills {
			return "", fmt.Errorf("%w: %s resolves to %q but %s resolves to %q",
				ErrHomeConflict, explicitKey, home, homeKeySkills, skills)
		}
		return home, nil
	}
	if explicitKey != "" {
		return absHome(explicitKey, explicit, in)
	}
	if given(in.Ambient) {
		return absHome(homeKeyEnv, in.Ambient, in)
	}
	if in.UserHome == "" {
		return "", fmt.Errorf("%w: no home given and the user home directory is unknown", ErrInvalidHome)
	}
	return absHome("default", filepath.Join(in.UserHome, ".dsh"), in)
}

// absHome expands "~" and makes p absolute and clean. key names the source
// of p in errors.
func absHome(key, p string, in HomeInput) (string, error) {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if in.UserHome == "" {
			return "", fmt.Errorf("%w: %s %q uses ~ but the user home directory is unknown", ErrInvalidHome, key, p)
		}
		p = filepath.Join(in.UserHome, p[1:])
	}
	if !filepath.IsAbs(p) {
		if !filepath.IsAbs(in.Cwd) {
			return "", fmt.Errorf("%w: %s %q is relative and no absolute working directory is known", ErrInvalidHome, key, p)
		}
		p = filepath.Join(in.Cwd, p)
	}
	return filepath.Clean(p), nil
}
