package netallow

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestParseEdges: every bound of an entry holds at its exact edge: a name
// of 253 bytes and a label of 63 are names, one more byte is not; ports 1
// and 65535 are ports, 0 and 65536 are not; the longest entry there is (a
// 253-byte name, its root dot and a port: 260 bytes) parses; an allowlist
// of MaxEntries entries parses, one more does not.
func TestParseEdges(t *testing.T) {
	t.Parallel()
	name253 := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	if len(name253) != 253 {
		t.Fatalf("name of %d bytes", len(name253))
	}
	label63 := strings.Repeat("x", 63) + ".example.org"
	for s, ok := range map[string]bool{
		name253:                    true,
		name253 + "d":              false,
		name253 + ".:65535":        true, // 260 bytes
		label63:                    true,
		"x" + label63:              false,
		"example.org:1":            true,
		"example.org:65535":        true,
		"example.org:0":            false,
		"example.org:65536":        false,
		"[2001:db8::1]:1":          true,
		"[2001:db8::1]:65535":      true,
		"[2001:db8::1]:65536":      false,
		"*." + name253 + ".:65535": false, // 262 bytes
	} {
		_, err := ParseEntry(s)
		if (err == nil) != ok {
			t.Errorf("ParseEntry(%d bytes %.20q…) = %v, want accepted %v", len(s), s, err, ok)
		}
	}

	entries := make([]string, MaxEntries+1)
	for i := range entries {
		entries[i] = fmt.Sprintf("h%d.example.org", i)
	}
	if _, err := Parse(entries[:MaxEntries]); err != nil {
		t.Errorf("Parse of %d entries: %v", MaxEntries, err)
	}
	if _, err := Parse(entries); !errors.Is(err, ErrInvalid) {
		t.Errorf("Parse of %d entries: %v, want ErrInvalid", len(entries), err)
	}

	for hp, ok := range map[string]bool{"h.test:1": true, "h.test:65535": true, "h.test:0": false, "h.test:65536": false} {
		if _, _, err := splitHostPort(hp, 80); (err == nil) != ok {
			t.Errorf("splitHostPort(%q) = %v, want accepted %v", hp, err, ok)
		}
	}
}
