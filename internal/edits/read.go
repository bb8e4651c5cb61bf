package edits

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Read defaults, as Claude Code's Read tool describes them.
const (
	// DefaultLimit is how many lines Number gives when limit is 0.
	DefaultLimit = 2000
	// MaxLineRunes is the length past which Number cuts a line.
	MaxLineRunes = 2000
	// BinarySniff is how many leading bytes IsBinary looks at.
	BinarySniff = 8 << 10
)

// ErrOffset is returned by Number for an offset past the file's last line
// or below zero.
var ErrOffset = errors.New("offset out of range")

// Lines returns how many lines content has: a last line without a newline
// counts, a final newline does not start one.
func Lines(content string) int {
	n := strings.Count(content, "\n")
	if content != "" && !strings.HasSuffix(content, "\n") {
		n++
	}
	return n
}

// Number renders content's lines from offset (1-based; 0 means 1) for at
// most limit lines (0 or less means DefaultLimit) the way `cat -n` does and
// Claude Code's Read shows them: the line number right-aligned in six
// columns, a tab, the line, a newline. A line's CR before its LF is not shown
// (edit_file matches LF against a CRLF file; see Replace), and a line longer
// than MaxLineRunes characters is cut there, at a character boundary.
//
// An empty content gives "" (the caller says the file is empty). An offset
// past the last line, or negative, is ErrOffset with the file's line count.
// Lines returns the count, so a caller can say how many are left.
func Number(content string, offset, limit int) (string, error) {
	if offset < 0 {
		return "", fmt.Errorf("%w: offset %d is negative; lines are numbered from 1", ErrOffset, offset)
	}
	if offset == 0 {
		offset = 1
	}
	if limit <= 0 {
		limit = DefaultLimit
	}
	if content == "" {
		return "", nil
	}
	total := Lines(content)
	if offset > total {
		return "", fmt.Errorf("%w: offset %d is past the end: the file has %d lines", ErrOffset, offset, total)
	}
	// Skip to the offset's line.
	s := content
	for i := 1; i < offset; i++ {
		s = s[strings.IndexByte(s, '\n')+1:]
	}
	var b strings.Builder
	b.Grow(min(len(s), limit*80) + limit*8)
	var num [20]byte
	for n := offset; n < offset+limit && s != ""; n++ {
		line := s
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			line, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		line = strings.TrimSuffix(line, "\r")
		if len(line) > MaxLineRunes { // bytes ≥ runes: only then can it be too long
			line = cutRunes(line, MaxLineRunes)
		}
		d := strconv.AppendInt(num[:0], int64(n), 10)
		for pad := 6 - len(d); pad > 0; pad-- {
			b.WriteByte(' ')
		}
		b.Write(d)
		b.WriteByte('\t')
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// cutRunes returns the first max characters of s.
func cutRunes(s string, max int) string {
	for i := range s {
		if max == 0 {
			return s[:i]
		}
		max--
	}
	return s
}

// IsBinary reports whether b looks like a binary file rather than text, from
// its first BinarySniff bytes: any NUL byte (git's and grep's test), or more
// than one byte in ten not part of valid UTF-8 (text in a legacy 8-bit
// encoding has a few such bytes, compressed or machine data has many). A
// character cut by the sniff's end is not counted. An empty b is text.
func IsBinary(b []byte) bool {
	if len(b) > BinarySniff {
		b = b[:BinarySniff]
	}
	bad := 0
	for i := 0; i < len(b); {
		c := b[i]
		if c == 0 {
			return true
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			if !utf8.FullRune(b[i:]) {
				break // cut by the sniff's end (or the file's)
			}
			bad++
		}
		i += size
	}
	return bad*10 > len(b)
}
