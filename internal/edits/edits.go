// Package edits computes the model tools' edits: edit_file's unique
// old_string → new_string replacement and apply_patch in Codex's grammar.
// It never touches a file system: callers read and write.
//
// The semantics follow the vendors' tools, so a model trained on them gets
// what it expects:
//
//   - Replace is Claude Code's Edit: old_string must occur, and exactly once
//     unless replace_all is set; the match is literal. One exception: a file
//     whose lines end in CRLF keeps them (see Replace).
//   - Parse and Plan are Codex's apply_patch: the same grammar and the same
//     lenient parsing (padded markers, a heredoc wrapper), the same context
//     search (exact, then ignoring trailing whitespace, then ignoring
//     surrounding whitespace, then with typographic punctuation made ASCII),
//     and an updated file always ends with a line ending. Where dshd differs
//     from Codex it is to refuse rather than guess or clobber; each
//     difference is documented where it happens (Parse, Plan).
//
// Floor 0 of the layout (docs/design.md#floors): it imports no other package of dshd.
package edits

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of Replace. Each is wrapped with detail; test with errors.Is.
var (
	// ErrNotFound: old_string does not occur in the file.
	ErrNotFound = errors.New("old_string not found in the file")
	// ErrNotUnique: old_string occurs more than once and replace_all is not set.
	ErrNotUnique = errors.New("old_string is not unique in the file")
	// ErrNoChange: old_string and new_string are the same.
	ErrNoChange = errors.New("old_string and new_string are the same")
	// ErrEmptyOld: old_string is empty and the file is not.
	ErrEmptyOld = errors.New("old_string is empty")
)

// Replace returns content with old replaced by new (every occurrence when
// all), and how many were replaced. The match is literal and occurrences do
// not overlap.
//
// It returns ErrNoChange when old == new, ErrNotFound when old does not occur,
// and ErrNotUnique (with the count of occurrences as the int) when old occurs
// more than once and all is false. An empty old fills an empty content with
// new (Claude Code's way to write an empty file) and is ErrEmptyOld otherwise.
//
// Line endings: the file keeps its style, that of its first line. In a CRLF
// file, old is matched as given and, failing that, with each of its bare LFs
// read as CRLF (a model writes old_string from numbered lines that show no
// CR), and every bare LF of new is written as CRLF. In an LF file, likewise,
// old's CRLFs are read as LF when old is not found as given, and new's CRLFs
// are written as LF. In a file without a line ending new is written as
// given. A trailing newline is neither added nor removed: the bytes outside
// the match are kept exactly.
func Replace(content, old, new string, all bool) (string, int, error) {
	if old == new {
		return "", 0, ErrNoChange
	}
	if old == "" {
		if content != "" {
			return "", 0, fmt.Errorf("%w: give the text to replace (the file is not empty)", ErrEmptyOld)
		}
		return new, 1, nil
	}
	n := strings.Count(content, old)
	if i := strings.IndexByte(content, '\n'); i >= 0 {
		style := toLF
		if i > 0 && content[i-1] == '\r' {
			style = toCRLF
		}
		if n == 0 {
			if o := style(old); o != old {
				old, n = o, strings.Count(content, o)
			}
		}
		new = style(new)
		if old == new {
			return "", 0, ErrNoChange
		}
	}
	switch {
	case n == 0:
		return "", 0, ErrNotFound
	case n > 1 && !all:
		return "", n, fmt.Errorf("%w: %d matches; give more surrounding context to make it unique, or set replace_all", ErrNotUnique, n)
	}
	return strings.ReplaceAll(content, old, new), n, nil
}

// toLF turns every CRLF into LF.
func toLF(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }

// toCRLF turns every LF not already preceded by CR into CRLF.
func toCRLF(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + strings.Count(s, "\n"))
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' && (i == 0 || s[i-1] != '\r') {
			b.WriteByte('\r')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
