// Package shellenv owns dshd's managed environment: the DSH_ namespace, the
// registry of contributors that declare and resolve managed facts, the
// built-in contributors, plugin scopes with leases, and the resolution of the
// dshd home directory.
//
// # Concurrency
//
// The registry keeps its state in an immutable snapshot behind an
// atomic.Pointer. Every change (register, unregister, plugin open, renew,
// close or expiry) builds a new snapshot under a writer mutex and swaps it in
// with one store, so readers (Collect, Declarations, Contributors, Plugins)
// never take a lock, never block writers, and always see either the whole
// state before a change or the whole state after it.
//
// # Errors
//
// Register checks a Spec in a fixed order and reports the first class of
// failure that applies:
//
//  1. Problems intrinsic to the request: a malformed name, key, description,
//     resolver kind, placeholder, value or URL. All of them are reported
//     together in one *DeclarationError. If the only problems are reserved
//     keys, the error matches ErrReservedKey; otherwise it matches
//     ErrInvalidDeclaration (and still lists the reserved keys among the
//     problems).
//  2. A reference to a plugin that does not exist (or whose lease has
//     passed): ErrPluginNotFound.
//  3. Conflicts with registered state: a duplicate name
//     (ErrDuplicateContributor), then a key owned by another contributor
//     (*KeyOwnedError, matching ErrKeyOwned).
//  4. Failure to persist a durable contributor: the wrapped I/O error.
//
// A failed registration stores nothing.
//
// Floor 1 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package shellenv
