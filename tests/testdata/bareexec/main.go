// Command bareexec is the benchmarks' calibration point (package
// bareexec) in a process of its own: it prints its URL and serves
// POST /exec.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/dshd/dshd/internal/bareexec"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	http.Handle("POST /exec", bareexec.Handler())
	_ = http.Serve(ln, nil)
}
