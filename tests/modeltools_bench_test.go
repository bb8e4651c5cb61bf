package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkReadFile2000: read_file of a 2,000-line file through the tools
// route, beside the same read through the bash tool (`cat -n`), the two
// interleaved call by call in one run. It prints both medians and their
// ratio; it asserts nothing about time.
func BenchmarkReadFile2000(b *testing.B) {
	dir := filesDir(b, "bench-read")
	var sb strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&sb, "line %d: the quick brown fox jumps over the lazy dog\n", i)
	}
	file := filepath.Join(dir, "file.txt")
	if err := os.WriteFile(file, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	s := startServer(b)
	a := s.newAgentTB(b, dir)
	readBody, _ := json.Marshal(map[string]any{"arguments": map[string]any{"file_path": file}})
	bashBody, _ := json.Marshal(map[string]any{"arguments": map[string]any{"command": "cat -n " + file}})
	call := func(tool string, body []byte) (time.Duration, string) {
		t0 := time.Now()
		out := s.post(b, "/agents/"+a+"/tools/"+tool, body)
		d := time.Since(t0)
		var r toolResult
		if err := json.Unmarshal(out, &r); err != nil || r.IsError {
			b.Fatalf("%s: %v %s", tool, err, out)
		}
		return d, r.Text
	}
	// Both answer the same lines (bash's capture may elide the middle).
	if _, text := call("read_file", readBody); !strings.Contains(text, "  2000\tline 2000:") || strings.Contains(text, "goes on") {
		b.Fatalf("read_file answered %.200q…", text)
	}
	var readLat, bashLat []time.Duration
	b.ResetTimer()
	for range b.N {
		d, _ := call("read_file", readBody)
		readLat = append(readLat, d)
		d, _ = call("bash", bashBody)
		bashLat = append(bashLat, d)
	}
	b.StopTimer()
	rm, bm := median(readLat), median(bashLat)
	b.ReportMetric(float64(rm.Microseconds()), "read_file-median-µs")
	b.ReportMetric(float64(bm.Microseconds()), "bash-cat-n-median-µs")
	b.ReportMetric(float64(rm)/float64(bm), "read/bash")
}
