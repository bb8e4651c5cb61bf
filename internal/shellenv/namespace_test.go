package shellenv

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReservedKeys(t *testing.T) {
	want := []string{"DSH_HOME", "DSH_SESSION_ID", "DSH_SESSION_JSONL", "DSH_SHELL"}
	if diff := cmp.Diff(want, ReservedKeys()); diff != "" {
		t.Errorf("ReservedKeys() (-want +got):\n%s", diff)
	}
	for _, k := range want {
		if !strings.HasPrefix(k, Prefix) || !IsReservedKey(k) || !IsValidKey(k) || !IsManaged(k) {
			t.Errorf("%s: want managed, valid and reserved", k)
		}
	}
}

func TestIsValidKey(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"DSH_A", true},
		{"DSH_A1_B", true},
		{"DSH_A_", true},
		{"DSH_", false},
		{"DSH_1A", false},
		{"DSH__A", false},
		{"DSH_a", false},
		{"DSH_A-B", false},
		{"dsh_A", false},
		{"FOO_A", false},
		{"DSH_A B", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := IsValidKey(tt.key); got != tt.want {
				t.Errorf("IsValidKey(%q) = %v, want %v", tt.key, got, tt.want)
			}
		})
	}
}

func TestIsValidName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"simple", "git", true},
		{"all classes", "a1.b_c-d", true},
		{"digit first", "9lives", true},
		{"max length", strings.Repeat("a", MaxNameLen), true},
		{"too long", strings.Repeat("a", MaxNameLen+1), false},
		{"empty", "", false},
		{"upper", "Git", false},
		{"space", "a b", false},
		{"leading dot", ".a", false},
		{"leading dash", "-a", false},
		{"slash", "a/b", false},
		{"non-ascii", "é", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsValidName(tt.in); got != tt.want {
				t.Errorf("IsValidName(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestOverlayAccessors(t *testing.T) {
	o := Overlay{kvs: []KV{{"DSH_A", "1"}, {"DSH_B", "x=y"}}}
	if got, ok := o.Get("DSH_B"); !ok || got != "x=y" {
		t.Errorf("Get(DSH_B) = %q, %v; want x=y, true", got, ok)
	}
	if _, ok := o.Get("DSH_C"); ok {
		t.Error("Get(DSH_C) present, want absent")
	}
	if diff := cmp.Diff([]string{"PATH=/bin", "DSH_A=1", "DSH_B=x=y"}, o.AppendEnv([]string{"PATH=/bin"})); diff != "" {
		t.Errorf("AppendEnv (-want +got):\n%s", diff)
	}
	all := o.All()
	all[0].Value = "changed"
	if got, _ := o.Get("DSH_A"); got != "1" {
		t.Errorf("mutating All() changed the overlay: DSH_A = %q", got)
	}
	if diff := cmp.Diff(map[string]string{"DSH_A": "1", "DSH_B": "x=y"}, o.Map()); diff != "" {
		t.Errorf("Map (-want +got):\n%s", diff)
	}
	var zero Overlay
	if zero.Len() != 0 || len(zero.AppendEnv(nil)) != 0 {
		t.Error("zero Overlay is not empty")
	}
}
