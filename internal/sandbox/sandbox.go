// Package sandbox confines what a job's command may touch: which parts of
// the file system it may write, whether it sees the dshd home, and whether
// it has a network. The harness chooses a Policy (server default, per agent,
// per execution); the model never can.
//
// A confined command gets a mount namespace of its own: the whole file
// system read-only, the writable roots bound back read-write, .git and
// protected paths read-only again inside them, the dshd home hidden under an
// empty tmpfs (skills bound back read-only), the token file covered, a
// private /tmp and a minimal /dev; a network namespace of its own (loopback
// only) when the network is off, and also under an allowlist, where the
// one way out is the proxy dshd serves from outside (package netallow) on a
// listener it opens inside that namespace; no capabilities and no way to
// gain any;
// a seccomp filter denying the kernel surface no command needs (seccomp.go).
// Two mechanisms build it (see Mechanism): the kernel's namespaces entered
// by the spawning thread itself, with Landlock scoping the command's signals
// and ptrace to its own processes (no extra process, the default where dshd
// may create namespaces), or bubblewrap as the command's leader.
//
// Linux only: on another system the build stops at linux_only.go, whose
// import path says so.
//
// Floor 1 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/dshd/dshd/internal/netallow"
)

// FS is a file-system policy.
type FS string

// The file-system policies, loosest first.
const (
	// Unrestricted is no confinement: the command has every power of the
	// server's user.
	Unrestricted FS = "unrestricted"
	// WorkspaceWrite makes the file system readable (the dshd home hidden)
	// and writable only in the execution's cwd, the agent's workspace, a
	// private /tmp and configured extra roots; .git and protected paths stay
	// read-only inside them.
	WorkspaceWrite FS = "workspace-write"
	// ReadOnly makes the file system readable (the dshd home hidden) and
	// writable only in a private /tmp.
	ReadOnly FS = "read-only"
)

// Network is a network policy.
type Network string

// The network policies, loosest first.
const (
	NetworkOn Network = "on"
	// NetworkAllowlist: a network namespace of its own, whose one way out
	// is dshd's proxy, to the hosts Policy.Allow names (package netallow).
	NetworkAllowlist Network = "allowlist"
	NetworkOff       Network = "off" // a network namespace of its own: loopback only, nobody listening
)

// Hosts is a network allowlist in canonical form (sorted, without
// duplicates). It is comparable, so a Policy is; its JSON is an array of
// entries. The zero Hosts lists nothing.
type Hosts struct {
	s   string
	bad string // why HostsOf's entries were invalid; Validate reports it
}

// HostsOf is NewHosts for a request: invalid entries make a Hosts that
// Policy.Validate rejects, saying why.
func HostsOf(entries []string) Hosts {
	l, err := netallow.Parse(entries)
	if err != nil {
		return Hosts{s: "\x00", bad: err.Error()}
	}
	return Hosts{s: strings.Join(l.Entries(), "\n")}
}

// NewHosts parses and canonicalizes entries (netallow.Parse).
func NewHosts(entries []string) (Hosts, error) {
	l, err := netallow.Parse(entries)
	if err != nil {
		return Hosts{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return Hosts{s: strings.Join(l.Entries(), "\n")}, nil
}

// MustHosts is NewHosts for entries known to be valid.
func MustHosts(entries ...string) Hosts {
	h, err := NewHosts(entries)
	if err != nil {
		panic(err)
	}
	return h
}

// Entries returns the entries; nil for none.
func (h Hosts) Entries() []string {
	if h.s == "" {
		return nil
	}
	return strings.Split(h.s, "\n")
}

// Equal reports whether h and o list the same entries (go-cmp uses it).
func (h Hosts) Equal(o Hosts) bool { return h == o }

// IsZero reports whether h lists nothing.
func (h Hosts) IsZero() bool { return h.s == "" }

// List returns h parsed.
func (h Hosts) List() netallow.List {
	l, _ := netallow.Parse(h.Entries())
	return l
}

// MarshalJSON renders h as an array of entries.
func (h Hosts) MarshalJSON() ([]byte, error) {
	e := h.Entries()
	if e == nil {
		e = []string{}
	}
	return json.Marshal(e)
}

// UnmarshalJSON parses an array of entries.
func (h *Hosts) UnmarshalJSON(b []byte) error {
	var e []string
	if err := json.Unmarshal(b, &e); err != nil {
		return err
	}
	v, err := NewHosts(e)
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// Errors.
var (
	// ErrInvalid: a policy name that does not exist.
	ErrInvalid = errors.New("invalid sandbox policy")
	// ErrLooser: a policy looser than the one it must stay within (a child
	// agent's, or an execution's, against its agent's).
	ErrLooser = errors.New("sandbox policy looser than allowed")
	// ErrUnavailable: this host cannot enforce the policy.
	ErrUnavailable = errors.New("sandbox policy cannot be enforced on this host")
)

// Policy is a complete or partial sandbox policy; an empty field means "not
// given" and is filled by Or.
type Policy struct {
	FS      FS      `json:"policy,omitempty"`
	Network Network `json:"network,omitempty"`
	// Allow is the allowlist of NetworkAllowlist (and set only with it).
	Allow Hosts `json:"allow,omitzero"`
}

// Default is today's behaviour, the server default when config sets none.
var Default = Policy{FS: Unrestricted, Network: NetworkOn}

func fsRank(f FS) int {
	switch f {
	case Unrestricted:
		return 0
	case WorkspaceWrite:
		return 1
	case ReadOnly:
		return 2
	}
	return -1
}

func netRank(n Network) int {
	switch n {
	case NetworkOn:
		return 0
	case NetworkAllowlist:
		return 1
	case NetworkOff:
		return 2
	}
	return -1
}

// Validate checks what p gives, which may be part of a policy (a request's,
// before Or fills it from the policy it is within): the names, the
// allowlist's entries, and an allowlist given beside another network.
// Whether an allowlist has its entries is known once p is complete: see
// ValidateEffective.
func (p Policy) Validate() error {
	if p.FS != "" && fsRank(p.FS) < 0 {
		return fmt.Errorf("%w: policy %q (want unrestricted, workspace-write or read-only)", ErrInvalid, p.FS)
	}
	if p.Network != "" && netRank(p.Network) < 0 {
		return fmt.Errorf("%w: network %q (want on, allowlist or off)", ErrInvalid, p.Network)
	}
	if p.Allow.bad != "" {
		return fmt.Errorf("%w: allow: %s", ErrInvalid, p.Allow.bad)
	}
	if p.Network != "" && p.Network != NetworkAllowlist && !p.Allow.IsZero() {
		return errAllowWithout
	}
	return nil
}

var errAllowWithout = fmt.Errorf("%w: allow is given only with network allowlist", ErrInvalid)

// ValidateEffective checks p as the policy in effect (complete, as Or
// leaves it): Validate, both axes given, an allowlist with its entries and
// entries only with an allowlist, and no entry naming a loopback or
// unspecified address (netallow.List.OwnAddrs): those are refused pointing
// at the pinned names (sandbox.proxyHosts), the one way to a service on
// the host's loopback.
func (p Policy) ValidateEffective() error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.FS == "" || p.Network == "" {
		return fmt.Errorf("%w: incomplete policy %q, network %q", ErrInvalid, p.FS, p.Network)
	}
	if p.Network == NetworkAllowlist && p.Allow.IsZero() {
		return fmt.Errorf("%w: network allowlist needs allow, the hosts it lists (for none, network off)", ErrInvalid)
	}
	if p.Network != NetworkAllowlist && !p.Allow.IsZero() {
		return errAllowWithout
	}
	if own := p.Allow.List().OwnAddrs(); len(own) > 0 {
		return fmt.Errorf("%w: allow: %s names a loopback or unspecified address, which inside the sandbox is the command's own network namespace (its clients reach it directly, without the proxy), not the host's; to reach a service on the host's loopback, the operator pins a name to its address (sandbox.proxyHosts) and the allowlist lists that name",
			ErrInvalid, strings.Join(own, ", "))
	}
	return nil
}

// Or fills the fields p leaves empty from def, the policy p is within (an
// agent's, the server default): each field left out is def's. An allowlist
// left out is def's when both are allowlists (so {network: allowlist}
// inside an allowlist keeps its hosts, and {allow: [...]} alone keeps its
// network); a network other than allowlist takes no allowlist.
func (p Policy) Or(def Policy) Policy {
	if p.FS == "" {
		p.FS = def.FS
	}
	if p.Network == "" {
		p.Network = def.Network
	}
	if p.Allow.IsZero() && p.Network == NetworkAllowlist && def.Network == NetworkAllowlist {
		p.Allow = def.Allow
	}
	return p
}

// Confined reports whether p needs a sandbox at all.
func (p Policy) Confined() bool { return p.FS != Unrestricted || p.Network != NetworkOn }

// Within reports whether p is at least as tight as outer on both axes.
func (p Policy) Within(outer Policy) bool {
	if fsRank(p.FS) < fsRank(outer.FS) || netRank(p.Network) < netRank(outer.Network) {
		return false
	}
	// Under an allowlist, each of p's entries within one of outer's.
	return p.Network != NetworkAllowlist || outer.Network != NetworkAllowlist || p.Allow.List().Within(outer.Allow.List())
}

// CheckWithin returns ErrLooser, naming both, when p is not Within outer.
// what names outer ("agent agt_x").
func (p Policy) CheckWithin(outer Policy, what string) error {
	if p.Within(outer) {
		return nil
	}
	return fmt.Errorf("%w: %s allows at most %s, requested %s", ErrLooser, what, outer, p)
}

func (p Policy) String() string {
	if p.Network == NetworkAllowlist {
		return fmt.Sprintf("%s, network allowlist (%s)", p.FS, strings.Join(p.Allow.Entries(), ", "))
	}
	return fmt.Sprintf("%s, network %s", p.FS, p.Network)
}

// Sentence says in one short sentence what a command may do under p, for
// the model (the bash tool's description ends with it).
func (p Policy) Sentence() string {
	var fs string
	switch p.FS {
	case Unrestricted:
		fs = "Sandbox: none, full file access"
	case WorkspaceWrite:
		fs = "Sandbox " + string(p.FS) + ": write only in workdir, workspace, /tmp; .git read-only"
	case ReadOnly:
		fs = "Sandbox " + string(p.FS) + ": write only in /tmp"
	}
	// An allowlist's hosts are not named: the bash description has 1,024
	// characters in all (a refusal's 403 names the host and the reason).
	return fs + "; network " + string(p.Network) + "."
}
