package netallow

import "net/netip"

// restricted are the ranges a name may not lead to unless the allowlist
// names the address itself: what is not the public internet (this host,
// the local link and its cloud metadata service, private networks), where
// a permitted-looking name would otherwise carry a command.
var restricted = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address (cloud metadata)"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a protocol-assignment address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fc00::/7"), "a private (unique local) address"},
	{netip.MustParsePrefix("fec0::/10"), "a private (site-local) address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "a cloud metadata address"},
}

// Restricted says why a name that resolves to a may not be reached through
// it ("a loopback address"), or "" when a is a public address. IPv4 inside
// IPv6 (mapped, NAT64 64:ff9b::/96, 6to4 2002::/16) is judged by the IPv4
// address it carries.
func Restricted(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case netip.MustParsePrefix("64:ff9b::/96").Contains(a):
			return Restricted(netip.AddrFrom4([4]byte(b[12:16])))
		case netip.MustParsePrefix("2002::/16").Contains(a):
			return Restricted(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	for _, r := range restricted {
		if r.prefix.Contains(a) {
			return r.why
		}
	}
	return ""
}
