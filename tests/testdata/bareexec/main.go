// Command bareexec is the benchmarks' calibration point: the smallest
// net/http server that runs `bash -c <command>` per request and answers
// with its output. dshd's figures are read beside it and beside spawning
// directly, all measured in the same run on the same machine.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	http.HandleFunc("POST /exec", func(w http.ResponseWriter, r *http.Request) {
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
	_ = http.Serve(ln, nil)
}
