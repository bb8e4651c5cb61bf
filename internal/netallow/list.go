// Package netallow is the network allowlist: which hosts a confined command
// may reach, and the proxy, run by dshd outside every sandbox, through which
// it reaches them. A command under the allowlist policy lives in a network
// namespace of its own (loopback only); the one way out is a listener dshd
// opens inside that namespace (127.0.0.1:Port), whose connections this
// package's proxy serves from outside: HTTP CONNECT and plain-HTTP
// forwarding, decided by the host the client names (never by an address
// alone), resolved by the proxy itself, dialled only at an address that was
// checked. Each job gets its own Session, so every decision is the job's.
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package netallow

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalid: an entry that is not a host, a *.domain or an address, with
// an optional port.
var ErrInvalid = errors.New("invalid network allowlist entry")

// MaxEntries bounds an allowlist.
const MaxEntries = 256

// Entry is one allowlist entry: a host name ("api.example.com"), every
// name below a domain ("*.example.org": not example.org itself), or an
// address ("10.0.0.5", "[fd00::1]"); with a port, only that port.
type Entry struct {
	// Host is the lower-case name without the "*." of a wildcard, or ""
	// for an address.
	Host string
	// Wildcard: every name strictly below Host.
	Wildcard bool
	// Addr is the address of an address entry.
	Addr netip.Addr
	// Port is the only port allowed; 0 means any.
	Port int
}

// String renders e as it is parsed.
func (e Entry) String() string {
	var h string
	switch {
	case e.Addr.IsValid() && e.Addr.Is6():
		h = "[" + e.Addr.String() + "]"
	case e.Addr.IsValid():
		h = e.Addr.String()
	case e.Wildcard:
		h = "*." + e.Host
	default:
		h = e.Host
	}
	if e.Port != 0 {
		h += ":" + strconv.Itoa(e.Port)
	}
	return h
}

// ParseEntry parses one entry.
func ParseEntry(s string) (Entry, error) {
	bad := func(why string) (Entry, error) {
		return Entry{}, fmt.Errorf("%w: %q: %s", ErrInvalid, s, why)
	}
	if s == "" || len(s) > 260 {
		return bad("want a host name, *.domain or an address, with an optional :port")
	}
	host, port := s, 0
	parsePort := func(ps string) bool {
		p, err := strconv.Atoi(ps)
		if err != nil || p < 1 || p > 65535 || ps[0] == '0' || ps[0] == '+' {
			return false
		}
		port = p
		return true
	}
	switch {
	case strings.HasPrefix(s, "["):
		i := strings.IndexByte(s, ']')
		if i < 0 {
			return bad("unbalanced brackets")
		}
		if rest := s[i+1:]; rest != "" {
			if !strings.HasPrefix(rest, ":") || !parsePort(rest[1:]) {
				return bad("the port must be 1 to 65535")
			}
		}
		a, err := netip.ParseAddr(s[1:i])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return bad("not an IPv6 address")
		}
		return Entry{Addr: a, Port: port}, nil
	case strings.Count(s, ":") == 1:
		i := strings.IndexByte(s, ':')
		if !parsePort(s[i+1:]) {
			return bad("the port must be 1 to 65535")
		}
		host = s[:i]
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return bad("an address with a zone")
		}
		return Entry{Addr: a.Unmap(), Port: port}, nil
	}
	e := Entry{Port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		e.Wildcard, host = true, rest
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if !validName(host) {
		return bad("not a host name")
	}
	if e.Wildcard && !strings.Contains(host, ".") {
		return bad("a wildcard must name a domain with a dot (*.example.org), not a whole top-level domain")
	}
	e.Host = host
	return e, nil
}

// validName reports whether h is a DNS host name (letters, digits, '-' and
// '_' in labels of 1 to 63 bytes), and not all digits and dots (an address
// spelled in a way netip does not parse, such as 127.1).
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	digits := true
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range []byte(l) {
			switch {
			case c >= 'a' && c <= 'z', c == '-', c == '_':
				digits = false
			case c >= '0' && c <= '9':
			default:
				return false
			}
		}
	}
	return !digits
}

// List is a parsed allowlist, canonical: sorted, without duplicates.
type List struct{ entries []Entry }

// Parse parses entries into a List.
func Parse(entries []string) (List, error) {
	if len(entries) > MaxEntries {
		return List{}, fmt.Errorf("%w: %d entries, at most %d", ErrInvalid, len(entries), MaxEntries)
	}
	var l List
	var errs []error
	for _, s := range entries {
		e, err := ParseEntry(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.entries = append(l.entries, e)
	}
	if err := errors.Join(errs...); err != nil {
		return List{}, err
	}
	slices.SortFunc(l.entries, func(a, b Entry) int { return strings.Compare(a.String(), b.String()) })
	l.entries = slices.CompactFunc(l.entries, func(a, b Entry) bool { return a == b })
	return l, nil
}

// Entries returns l's entries, rendered.
func (l List) Entries() []string {
	out := make([]string, len(l.entries))
	for i, e := range l.entries {
		out[i] = e.String()
	}
	return out
}

// Len is the number of entries.
func (l List) Len() int { return len(l.entries) }

// OwnAddrs returns the entries naming a loopback (127.0.0.0/8, ::1) or
// unspecified (0.0.0.0, ::) address: inside a command's network namespace
// such an address is the namespace's own, which its clients reach
// directly (Env's NO_PROXY lists loopback; Go's clients never proxy it),
// not the host's service the entry means to allow.
func (l List) OwnAddrs() []string {
	var out []string
	for _, e := range l.entries {
		if e.Addr.IsValid() && (e.Addr.IsLoopback() || e.Addr.IsUnspecified()) {
			out = append(out, e.String())
		}
	}
	return out
}

// matchName reports whether entry e allows the name host (lower case, no
// trailing dot) on port.
func (e Entry) matchName(host string, port int) bool {
	if e.Addr.IsValid() || (e.Port != 0 && e.Port != port) {
		return false
	}
	if e.Wildcard {
		return strings.HasSuffix(host, "."+e.Host)
	}
	return host == e.Host
}

// matchAddr reports whether e names a (on port) explicitly.
func (e Entry) matchAddr(a netip.Addr, port int) bool {
	return e.Addr.IsValid() && e.Addr == a.Unmap() && (e.Port == 0 || e.Port == port)
}

// AllowsName reports whether l allows the host name host on port. host is
// compared in lower case, without a trailing dot.
func (l List) AllowsName(host string, port int) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return slices.ContainsFunc(l.entries, func(e Entry) bool { return e.matchName(host, port) })
}

// NamesAddr reports whether l lists the address a (on port) explicitly: the
// only way an address is reached directly, and the only way a name that
// resolves to a loopback, link-local or private address is.
func (l List) NamesAddr(a netip.Addr, port int) bool {
	return slices.ContainsFunc(l.entries, func(e Entry) bool { return e.matchAddr(a, port) })
}

// covers reports whether o allows everything e allows.
func (o Entry) covers(e Entry) bool {
	if o.Port != 0 && o.Port != e.Port {
		return false
	}
	switch {
	case e.Addr.IsValid():
		return o.Addr == e.Addr
	case o.Addr.IsValid():
		return false
	case o.Wildcard:
		return strings.HasSuffix(e.Host, "."+o.Host) || (e.Wildcard && e.Host == o.Host)
	default:
		return !e.Wildcard && o.Host == e.Host
	}
}

// Within reports whether l allows nothing that outer does not: each of its
// entries is covered by one of outer's.
func (l List) Within(outer List) bool {
	for _, e := range l.entries {
		if !slices.ContainsFunc(outer.entries, func(o Entry) bool { return o.covers(e) }) {
			return false
		}
	}
	return true
}

// splitHostPort splits "host:port" (or "[v6]:port"), defaulting the port
// to def when absent.
func splitHostPort(hp string, def int) (string, int, error) {
	host, ps, err := net.SplitHostPort(hp)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return strings.Trim(hp, "[]"), def, nil
		}
		return "", 0, err
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 1 || p > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	return host, p, nil
}
