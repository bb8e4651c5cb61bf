package exec

import (
	"slices"
	"strings"

	"github.com/dshd/dshd/internal/netallow"
	"github.com/dshd/dshd/internal/shellenv"
)

// Inherit says which of the server's environment variables a child starts
// from (docs/design.md#child-environment, step 1).
type Inherit string

// Inherit policies.
const (
	// InheritAll starts from the whole server environment (the default).
	InheritAll Inherit = "all"
	// InheritCore starts from PATH, SHELL, TMPDIR, TEMP, TMP, HOME, LANG,
	// LC_ALL, LC_CTYPE, LOGNAME and USER only.
	InheritCore Inherit = "core"
	// InheritNone starts from an empty environment.
	InheritNone Inherit = "none"
)

// Valid reports whether i is a known policy; "" counts as InheritAll.
func (i Inherit) Valid() bool {
	switch i {
	case "", InheritAll, InheritCore, InheritNone:
		return true
	}
	return false
}

// DefaultExcludes are the credential patterns removed from the inherited
// environment unless EnvPolicy.IgnoreDefaultExcludes is set. They match
// case-insensitively; '*' matches any run of characters, '?' one character.
func DefaultExcludes() []string { return []string{"*KEY*", "*PASSWORD*", "*SECRET*", "*TOKEN*"} }

// TerminalEnv returns the variables every child gets for a non-interactive
// agent terminal (docs/design.md#child-environment, step 3), as "K=V".
func TerminalEnv() []string {
	return []string{"NO_COLOR=1", "TERM=dumb", "PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0"}
}

// TTYEnv returns the terminal variables of a job that runs in a
// pseudo-terminal (Spec.TTY): TERM is term, a real terminal type, and
// NO_COLOR is not set, so colours reach the terminal; pagers and git's
// prompts stay off, as they would hang an agent that cannot answer them.
func TTYEnv(term string) []string {
	return []string{"TERM=" + term, "PAGER=cat", "GIT_PAGER=cat", "GIT_TERMINAL_PROMPT=0"}
}

// EnvPolicy is the configured environment policy (docs/design.md#child-environment).
type EnvPolicy struct {
	// Inherit selects the starting set; "" means InheritAll. Unknown values
	// inherit nothing (New rejects them).
	Inherit Inherit
	// Exclude lists extra case-insensitive globs of inherited names to drop.
	Exclude []string
	// IgnoreDefaultExcludes drops DefaultExcludes; Exclude still applies.
	IgnoreDefaultExcludes bool
	// Set are config values applied after the terminal environment. Names
	// in the managed namespace are ignored.
	Set map[string]string
	// Secrets are values no child may see, whatever the name of the
	// variable holding them (the server's bearer token): a variable whose
	// value, without surrounding white space, equals one is dropped at
	// every step, inherited, set, explicit and managed alike. Empty
	// strings are ignored.
	Secrets []string
}

func isCoreName(name string) bool {
	switch name {
	case "PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "USER":
		return true
	}
	return false
}

// BuildEnv returns a child's environment as "K=V" entries, following
// docs/design.md#child-environment in order: environ filtered by the inherit
// policy; every DSH_* name and every name matching the credential globs (and
// p.Exclude) removed; TerminalEnv; p.Set; explicit (names in the managed namespace dropped); managed last. A variable
// whose value is one of p.Secrets is dropped at every step. A later
// step overrides an earlier one in place, so no name appears twice. Entries
// of environ without '=' or with an empty name are skipped, as are malformed
// names in p.Set and explicit (empty, containing '=' or NUL).
//
// BuildEnv is pure. The Executor computes the first four steps once in New and
// applies only explicit and managed per execution.
func BuildEnv(p EnvPolicy, environ []string, explicit map[string]string, managed []string) []string {
	base := newBaseEnv(p, environ, TerminalEnv())
	return base.with(explicit, managed)
}

// baseEnv is docs/design.md#child-environment, steps 1–4, without the
// request's env: fixed per Executor.
type baseEnv struct {
	env     []string
	idx     map[string]int // name -> index in env
	secrets []string
}

// secret reports whether v, without surrounding white space, is a secret.
func (b *baseEnv) secret(v string) bool {
	if len(b.secrets) == 0 {
		return false
	}
	v = strings.TrimSpace(v)
	for _, s := range b.secrets {
		if v == s {
			return true
		}
	}
	return false
}

// newBaseEnv computes docs/design.md#child-environment, steps 1–4, without
// the request's env, with term as the terminal environment (TerminalEnv, or
// TTYEnv for terminal jobs).
func newBaseEnv(p EnvPolicy, environ, term []string) *baseEnv {
	b := &baseEnv{
		env: make([]string, 0, len(environ)+len(term)+len(p.Set)),
		idx: make(map[string]int, len(environ)+len(term)+len(p.Set)),
	}
	for _, sec := range p.Secrets {
		if sec = strings.TrimSpace(sec); sec != "" {
			b.secrets = append(b.secrets, sec)
		}
	}
	if p.Inherit == "" || p.Inherit == InheritAll || p.Inherit == InheritCore {
		var globs []string
		if !p.IgnoreDefaultExcludes {
			globs = DefaultExcludes()
		}
		globs = append(globs, p.Exclude...)
		for i, g := range globs {
			globs[i] = strings.ToUpper(g)
		}
		for _, kv := range environ {
			name := envName(kv)
			if name == "" || len(name) == len(kv) {
				continue
			}
			if p.Inherit == InheritCore && !isCoreName(name) {
				continue
			}
			if shellenv.IsManaged(name) || matchAny(globs, name) || b.secret(kv[len(name)+1:]) {
				continue
			}
			b.put(name, kv)
		}
	}
	for _, kv := range term {
		b.put(envName(kv), kv)
	}
	for _, k := range sortedKeys(p.Set) {
		if validEnvName(k) && !shellenv.IsManaged(k) && !b.secret(p.Set[k]) {
			b.put(k, k+"="+p.Set[k])
		}
	}
	b.env = slices.Clip(b.env)
	return b
}

func (b *baseEnv) put(name, kv string) {
	if i, ok := b.idx[name]; ok {
		b.env[i] = kv
		return
	}
	b.idx[name] = len(b.env)
	b.env = append(b.env, kv)
}

// with returns a new slice: the base with explicit (sorted by name, managed
// names dropped) and then managed applied. It allocates the result and, only
// when explicit is non-empty, a sorted key list; a map is used for appended
// names only when there are many of them.
func (b *baseEnv) with(explicit map[string]string, managed []string) []string {
	n := len(b.env)
	out := make([]string, n, n+len(explicit)+len(managed))
	copy(out, b.env)
	if len(explicit) == 0 && len(managed) == 0 {
		return out
	}
	m := merger{base: b, out: out}
	if len(explicit) > 0 {
		for _, k := range sortedKeys(explicit) {
			if validEnvName(k) && !shellenv.IsManaged(k) && !b.secret(explicit[k]) {
				m.set(k, k+"="+explicit[k])
			}
		}
	}
	for _, kv := range managed {
		name := envName(kv)
		if name == "" || len(name) == len(kv) || b.secret(kv[len(name)+1:]) {
			continue
		}
		m.set(name, kv)
	}
	return m.out
}

// merger applies overrides to a copy of the base env.
type merger struct {
	base  *baseEnv
	out   []string
	extra map[string]int // names appended past the base; built when many
}

// linearLimit: up to this many appended names, a linear scan beats a map
// (and allocates nothing).
const linearLimit = 16

func (m *merger) set(name, kv string) {
	if i, ok := m.base.idx[name]; ok {
		m.out[i] = kv
		return
	}
	n := len(m.base.env)
	if m.extra != nil {
		if i, ok := m.extra[name]; ok {
			m.out[i] = kv
			return
		}
		m.extra[name] = len(m.out)
		m.out = append(m.out, kv)
		return
	}
	for i := n; i < len(m.out); i++ {
		if envName(m.out[i]) == name {
			m.out[i] = kv
			return
		}
	}
	m.out = append(m.out, kv)
	if len(m.out)-n > linearLimit {
		m.extra = make(map[string]int, 2*(len(m.out)-n))
		for i := n; i < len(m.out); i++ {
			m.extra[envName(m.out[i])] = i
		}
	}
}

func envName(kv string) string {
	if i := strings.IndexByte(kv, '='); i >= 0 {
		return kv[:i]
	}
	return kv
}

func validEnvName(name string) bool {
	return name != "" && strings.IndexByte(name, '=') < 0 && strings.IndexByte(name, 0) < 0
}

func sortedKeys(m map[string]string) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func matchAny(upperGlobs []string, name string) bool {
	for _, g := range upperGlobs {
		if globMatchFold(g, name) {
			return true
		}
	}
	return false
}

// globMatchFold matches name against an upper-cased glob of '*' and '?',
// folding ASCII case in name. Other characters are literal (unlike
// path.Match, '[' and '\\' have no meaning: they are rare in names and a
// malformed pattern must not silently match nothing).
func globMatchFold(pattern, name string) bool {
	px, nx := 0, 0
	starPx, starNx := -1, 0
	for px < len(pattern) || nx < len(name) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starPx, starNx = px, nx+1
				px++
				continue
			case '?':
				if nx < len(name) {
					px++
					nx++
					continue
				}
			default:
				if nx < len(name) && upper(name[nx]) == c {
					px++
					nx++
					continue
				}
			}
		}
		if starPx >= 0 && starNx <= len(name) {
			px, nx = starPx+1, starNx
			starNx++
			continue
		}
		return false
	}
	return true
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// withProxyEnv sets, over env, the variables that send a command's HTTP
// clients to the network allowlist's proxy (netallow.Env): under the
// allowlist there is no other way out.
func withProxyEnv(env []string) []string {
	set := netallow.Env()
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		if !slices.ContainsFunc(set, func(s string) bool { return envName(s) == envName(kv) }) {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}
