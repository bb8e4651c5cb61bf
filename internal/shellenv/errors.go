package shellenv

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Methods wrap them with context; test with errors.Is, and
// use errors.As for the detailed types that carry them.
var (
	// ErrDuplicateContributor: Register was given a name already in use.
	ErrDuplicateContributor = errors.New("shellenv: duplicate contributor")
	// ErrKeyOwned: Register declared a key owned by another contributor.
	// Always carried by a *KeyOwnedError.
	ErrKeyOwned = errors.New("shellenv: key owned by another contributor")
	// ErrReservedKey: Register declared only reserved keys as its problem.
	// Carried by a *DeclarationError.
	ErrReservedKey = errors.New("shellenv: reserved key")
	// ErrInvalidDeclaration: Register was given a malformed Spec. Carried by
	// a *DeclarationError listing every problem found.
	ErrInvalidDeclaration = errors.New("shellenv: invalid declaration")
	// ErrPluginNotFound: no open plugin has the id (or its lease passed).
	ErrPluginNotFound = errors.New("shellenv: plugin not found")
	// ErrContributorNotFound: no contributor has the name (or its plugin's
	// lease passed).
	ErrContributorNotFound = errors.New("shellenv: contributor not found")
	// ErrBuiltinContributor: Unregister was asked to remove a built-in.
	ErrBuiltinContributor = errors.New("shellenv: built-in contributor cannot be removed")
	// ErrInvalidPlugin: OpenPlugin or RenewPlugin was given a blank or
	// malformed name or a lease out of range.
	ErrInvalidPlugin = errors.New("shellenv: invalid plugin")
	// ErrResolution: Collect could not resolve a contributor. Always carried
	// by a *ResolutionError.
	ErrResolution = errors.New("shellenv: environment resolution failed")
)

// KeyOwnedError reports a key that another contributor already owns. It
// matches ErrKeyOwned. When several keys clash, Key is the first in byte
// order.
type KeyOwnedError struct {
	Key   string // the contested key
	Owner string // name of the contributor that owns it
}

// Error names the key and its owner.
func (e *KeyOwnedError) Error() string {
	return fmt.Sprintf("key %s is owned by contributor %q", e.Key, e.Owner)
}

// Unwrap returns ErrKeyOwned.
func (e *KeyOwnedError) Unwrap() error { return ErrKeyOwned }

// DeclarationError lists every problem found in a Spec. It matches
// ErrReservedKey when reserved keys are the only problems, and
// ErrInvalidDeclaration otherwise.
type DeclarationError struct {
	Problems []string // human-readable, in a deterministic order
	// Err is ErrInvalidDeclaration or ErrReservedKey; nil means
	// ErrInvalidDeclaration.
	Err error
}

// Error lists every problem, separated by semicolons.
func (e *DeclarationError) Error() string {
	return fmt.Sprintf("%s: %s", strings.TrimPrefix(e.Unwrap().Error(), "shellenv: "), strings.Join(e.Problems, "; "))
}

// Unwrap returns ErrInvalidDeclaration or ErrReservedKey.
func (e *DeclarationError) Unwrap() error {
	if e.Err == nil {
		return ErrInvalidDeclaration
	}
	return e.Err
}

// ResolutionError reports the contributor whose resolver failed during
// Collect, and why. It matches ErrResolution.
type ResolutionError struct {
	Contributor string // contributor name
	Reason      string // e.g. "timed out after 2s", "undeclared key DSH_X"
}

// Error names the contributor and the reason.
func (e *ResolutionError) Error() string {
	return fmt.Sprintf("resolve contributor %q: %s", e.Contributor, e.Reason)
}

// Unwrap returns ErrResolution.
func (e *ResolutionError) Unwrap() error { return ErrResolution }
