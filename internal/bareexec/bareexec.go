// Package bareexec is the benchmarks' calibration point: the smallest
// net/http handler that runs `bash -c <command>` per request and answers
// with its output. dshd's figures are read beside it and beside spawning
// directly, all measured in the same run on the same machine: served by
// its own process (tests/testdata/bareexec) on the loopback benchmarks, and
// in process beside BenchmarkExecStages.
package bareexec

import (
	"encoding/json"
	"net/http"
	"os/exec"
)

// Handler answers POST {"command": "..."} with the command's combined
// output and exit code (-1 if it failed).
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Command string `json:"command"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := exec.Command("bash", "-c", req.Command).CombinedOutput()
		code := 0
		if err != nil {
			code = -1
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"output": string(out), "exitCode": code})
	})
}
