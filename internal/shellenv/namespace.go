package shellenv

import "strings"

// Prefix is the managed namespace: every environment name starting with it
// is decided by dshd alone. All other managed names derive from it.
const Prefix = "DSH_"

// Reserved keys. Only built-in contributors may own them; KeySessionJSONL is
// owned by nobody and never set.
const (
	// KeyHome is the absolute dshd home directory.
	KeyHome = Prefix + "HOME"
	// KeyShell is always "1" inside a dshd execution.
	KeyShell = Prefix + "SHELL"
	// KeySessionID is the executing agent's id, absent without an agent.
	KeySessionID = Prefix + "SESSION_ID"
	// KeySessionJSONL is reserved so that no contributor can publish a
	// transcript location; it is never set.
	KeySessionJSONL = Prefix + "SESSION_JSONL"
)

// IsManaged reports whether name is in the managed namespace (starts with
// Prefix). The check is case-sensitive, as environment names are.
func IsManaged(name string) bool { return strings.HasPrefix(name, Prefix) }

// ReservedKeys returns the reserved keys, sorted. The slice is new on every
// call.
func ReservedKeys() []string {
	return []string{KeyHome, KeySessionID, KeySessionJSONL, KeyShell}
}

// IsReservedKey reports whether key is one of ReservedKeys.
func IsReservedKey(key string) bool {
	switch key {
	case KeyHome, KeyShell, KeySessionID, KeySessionJSONL:
		return true
	}
	return false
}

// IsValidKey reports whether key matches ^DSH_[A-Z][A-Z0-9_]*$, the form
// every declared key must have. Reserved keys are valid keys.
func IsValidKey(key string) bool {
	if !IsManaged(key) || len(key) == len(Prefix) {
		return false
	}
	rest := key[len(Prefix):]
	if c := rest[0]; c < 'A' || c > 'Z' {
		return false
	}
	for i := 1; i < len(rest); i++ {
		c := rest[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// MaxNameLen is the longest contributor name Register accepts.
const MaxNameLen = 64

// builtinNamePrefix is reserved for built-in contributor names so that a new
// built-in can never collide with a persisted user contributor.
const builtinNamePrefix = "dsh."

// IsValidName reports whether name is a well-formed contributor name: 1 to
// MaxNameLen characters from lowercase letters, digits, '.', '_' and '-',
// starting with a letter or digit.
func IsValidName(name string) bool {
	if len(name) == 0 || len(name) > MaxNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}
