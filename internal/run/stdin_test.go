package run

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dshd/dshd/internal/exec"
)

// TestReadRange: output over the budget keeps its head and tail, each cut
// at a character boundary, around a line with the exact count left out.
func TestReadRange(t *testing.T) {
	w := newWorld(t)
	// 3,000 two-byte characters, then an end mark.
	job, err := w.jobs.Start(context.Background(), exec.Spec{Command: `for i in $(seq 3000); do printf 'é'; done; printf END`})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := job.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	total := snap.Stdout.TotalBytes
	for _, limit := range []int{100, 102, 1001} { // even halves cut the tail, odd ones the head, inside a character
		got, cut, elided := readRange(job, exec.Stdout, 0, total, limit)
		head, rest, ok := strings.Cut(got, "\n…[")
		if !cut || !ok {
			t.Fatalf("limit %d: %q, want a cut", limit, got)
		}
		n, tail, ok := strings.Cut(rest, " bytes elided]…\n")
		if !ok || !utf8.ValidString(head) || !utf8.ValidString(tail) || !strings.HasSuffix(tail, "END") {
			t.Errorf("limit %d: head %q, tail %q: want valid text ending in END", limit, head, tail)
		}
		if want := total - int64(len(head)) - int64(len(tail)); n != strconv.FormatInt(want, 10) {
			t.Errorf("limit %d: %s bytes elided, want %d", limit, n, want)
		}
		if want := [2]int64{int64(len(head)), total - int64(len(tail))}; elided != want {
			t.Errorf("limit %d: elided range %v, want %v", limit, elided, want)
		}
		if len(head) > limit/2 || len(tail) > limit/2 {
			t.Errorf("limit %d: head %d and tail %d bytes exceed half the limit", limit, len(head), len(tail))
		}
	}
	if got, cut, _ := readRange(job, exec.Stdout, total-3, total, 100); cut || got != "END" {
		t.Errorf("the last 3 bytes = %q (cut %v)", got, cut)
	}
}
