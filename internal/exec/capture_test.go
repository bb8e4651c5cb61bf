package exec

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCaptureText(t *testing.T) {
	tests := []struct {
		name   string
		limit  int
		writes []string
		want   string
		trunc  bool
		elided [2]int64 // ElidedFrom, ElidedTo
	}{
		{"fits", 10, []string{"abc", "def"}, "abcdef", false, [2]int64{}},
		{"exactly", 6, []string{"abc", "def"}, "abcdef", false, [2]int64{}},
		{"elided", 6, []string{"abc", "defgh", "ij"}, "abc\n…[4 bytes elided]…\nhij", true, [2]int64{3, 7}},
		{"big single write", 4, []string{"0123456789"}, "01\n…[6 bytes elided]…\n89", true, [2]int64{2, 8}},
		{"ring wraps", 4, []string{"01234", "5", "6", "7"}, "01\n…[4 bytes elided]…\n67", true, [2]int64{2, 6}},
		// é is 2 bytes: neither the head nor the tail may split it.
		{"rune safe", 7, []string{strings.Repeat("é", 10)}, "é\n…[14 bytes elided]…\néé", true, [2]int64{2, 16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &Job{e: &Executor{}}
			var c capture
			c.init(tt.limit, 1<<20, "", "", "")
			sink := j.sink(&c, "stdout")
			total := 0
			for _, w := range tt.writes {
				sink([]byte(w))
				total += len(w)
			}
			c.eof = true
			o := c.output()
			if o.Text != tt.want || o.Truncated != tt.trunc || o.TotalBytes != int64(total) {
				t.Errorf("output = %+v, want text %q truncated %v total %d", o, tt.want, tt.trunc, total)
			}
			if !utf8.ValidString(o.Text) {
				t.Errorf("text is not valid UTF-8: %q", o.Text)
			}
			if got := [2]int64{o.ElidedFrom, o.ElidedTo}; got != tt.elided {
				t.Errorf("elided range %v, want %v", got, tt.elided)
			}
			if o2 := c.output(); o2.Text != o.Text || o2.ElidedFrom != o.ElidedFrom || o2.ElidedTo != o.ElidedTo {
				t.Errorf("cached output differs: %+v, want %+v", o2, o)
			}
		})
	}
}
