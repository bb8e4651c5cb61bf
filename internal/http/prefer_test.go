package httpapi

import "testing"

func TestPrefersMinimal(t *testing.T) {
	for prefer, want := range map[string]bool{
		"return=minimal":                     true,
		"Return=Minimal":                     true,
		`return="minimal"`:                   true,
		"respond-async, return=minimal":      true,
		"return=minimal; foo=bar":            true,
		" handling=lenient , return=minimal": true,
		"return=representation":              false,
		"minimal":                            false,
		"":                                   false,
		"return":                             false,
		"x-return=minimal":                   false,
	} {
		if got := prefersMinimal(prefer); got != want {
			t.Errorf("prefersMinimal(%q) = %v, want %v", prefer, got, want)
		}
	}
}
