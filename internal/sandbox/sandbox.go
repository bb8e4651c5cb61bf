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
// only) when the network is off; no capabilities and no way to gain any;
// a seccomp filter denying the kernel surface no command needs (seccomp.go).
// Two mechanisms build it (see Mechanism): the kernel's namespaces entered
// by the spawning thread itself, with Landlock scoping the command's signals
// and ptrace to its own processes (no extra process, the default where dshd
// may create namespaces), or bubblewrap as the command's leader.
package sandbox

import (
	"errors"
	"fmt"
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
	NetworkOn  Network = "on"
	NetworkOff Network = "off" // a network namespace of its own: loopback only, nobody listening
)

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
	case NetworkOff:
		return 1
	}
	return -1
}

// Validate checks the names given (empty fields are allowed).
func (p Policy) Validate() error {
	if p.FS != "" && fsRank(p.FS) < 0 {
		return fmt.Errorf("%w: policy %q (want unrestricted, workspace-write or read-only)", ErrInvalid, p.FS)
	}
	if p.Network != "" && netRank(p.Network) < 0 {
		return fmt.Errorf("%w: network %q (want on or off)", ErrInvalid, p.Network)
	}
	return nil
}

// Or fills the fields p leaves empty from def.
func (p Policy) Or(def Policy) Policy {
	if p.FS == "" {
		p.FS = def.FS
	}
	if p.Network == "" {
		p.Network = def.Network
	}
	return p
}

// Confined reports whether p needs a sandbox at all.
func (p Policy) Confined() bool { return p.FS != Unrestricted || p.Network == NetworkOff }

// Within reports whether p is at least as tight as outer on both axes.
func (p Policy) Within(outer Policy) bool {
	return fsRank(p.FS) >= fsRank(outer.FS) && netRank(p.Network) >= netRank(outer.Network)
}

// CheckWithin returns ErrLooser, naming both, when p is not Within outer.
// what names outer ("agent agt_x").
func (p Policy) CheckWithin(outer Policy, what string) error {
	if p.Within(outer) {
		return nil
	}
	return fmt.Errorf("%w: %s allows at most %s, requested %s", ErrLooser, what, outer, p)
}

func (p Policy) String() string { return fmt.Sprintf("%s, network %s", p.FS, p.Network) }

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
	return fs + "; network " + string(p.Network) + "."
}
