package workspace

import (
	"bytes"
	"fmt"
	"strings"
)

// maxDiffCells bounds the line-by-line comparison (old lines × new lines)
// of one file's diff.
const maxDiffCells = 4 << 20

// unifiedDiff renders old → cur as a unified diff with three lines of
// context, a/ and b/ prefixed (/dev/null for an added or deleted file). It
// reports false when the files have too many lines to compare.
func unifiedDiff(path string, old, cur []byte, kind string) (string, bool) {
	ops, ok := diffOps(splitLines(old), splitLines(cur))
	if !ok {
		return "", false
	}
	var out strings.Builder
	from, to := "a/"+path, "b/"+path
	switch kind {
	case Added:
		from = "/dev/null"
	case Deleted:
		to = "/dev/null"
	}
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", from, to)
	const ctx = 3
	k := 0
	for k < len(ops) {
		if ops[k].k == ' ' {
			k++
			continue
		}
		// A hunk: from ctx lines before this change to ctx lines after
		// the last change closer than 2*ctx to the one before.
		start := max(0, k-ctx)
		end := k
		for e := k; e < len(ops); e++ {
			if ops[e].k != ' ' {
				end = e
			} else if e-end > 2*ctx {
				break
			}
		}
		end = min(len(ops), end+ctx+1)
		writeHunk(&out, ops, start, end)
		k = end
	}
	return out.String(), true
}

// diffOp is one line of a diff: k is ' ' (kept), '-' (old only) or '+'
// (new only).
type diffOp struct {
	k    byte
	line string
}

// diffOps compares the lines a (old) and b (new) over the whole files. It
// reports false when the part that differs has too many lines to compare.
func diffOps(a, b []string) ([]diffOp, bool) {
	// Trim the common head and tail: the table is built for the middle.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if (len(ma)+1)*(len(mb)+1) > maxDiffCells {
		return nil, false
	}
	ops := make([]diffOp, 0, len(a)+len(b))
	for _, l := range a[:pre] {
		ops = append(ops, diffOp{' ', l})
	}
	n, m := len(ma), len(mb)
	lcs := make([]int32, (n+1)*(m+1))
	at := func(i, j int) *int32 { return &lcs[i*(m+1)+j] }
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if ma[i] == mb[j] {
				*at(i, j) = *at(i+1, j+1) + 1
			} else {
				*at(i, j) = max(*at(i+1, j), *at(i, j+1))
			}
		}
	}
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && ma[i] == mb[j]:
			ops = append(ops, diffOp{' ', ma[i]})
			i, j = i+1, j+1
		case i < n && (j == m || *at(i+1, j) >= *at(i, j+1)):
			ops = append(ops, diffOp{'-', ma[i]})
			i++
		default:
			ops = append(ops, diffOp{'+', mb[j]})
			j++
		}
	}
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops, true
}

// writeHunk writes ops[start:end] as one hunk: its @@ header, counted from
// the lines before it, then its lines.
func writeHunk(out *strings.Builder, ops []diffOp, start, end int) {
	oldStart, newStart := 1, 1
	for _, o := range ops[:start] {
		if o.k != '+' {
			oldStart++
		}
		if o.k != '-' {
			newStart++
		}
	}
	oldN, newN := 0, 0
	for _, o := range ops[start:end] {
		if o.k != '+' {
			oldN++
		}
		if o.k != '-' {
			newN++
		}
	}
	if oldN == 0 {
		oldStart--
	}
	if newN == 0 {
		newStart--
	}
	fmt.Fprintf(out, "@@ -%d,%d +%d,%d @@\n", oldStart, oldN, newStart, newN)
	for _, o := range ops[start:end] {
		out.WriteByte(o.k)
		out.WriteString(strings.TrimSuffix(o.line, "\n"))
		out.WriteByte('\n')
		if !strings.HasSuffix(o.line, "\n") {
			out.WriteString("\\ No newline at end of file\n")
		}
	}
}

// splitLines splits b after each newline (the last line may lack one).
func splitLines(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, string(b))
			break
		}
		out = append(out, string(b[:i+1]))
		b = b[i+1:]
	}
	return out
}
