package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	contract "github.com/dshd/dshd/api"
)

// TestHostPolicy serves /healthz over real HTTP on loopback with the host
// settings cmd gives a remote listener (Hosts) and a Unix socket (AnyHost).
func TestHostPolicy(t *testing.T) {
	tests := []struct {
		name string
		deps Deps
		host string
		want int
	}{
		{"loopback address", Deps{}, "127.0.0.1:7433", 200},
		{"localhost", Deps{}, "localhost", 200},
		{"IPv6 loopback", Deps{}, "[::1]:7433", 200},
		{"foreign name", Deps{}, "rebind.example:7433", 421},
		{"name resolving to loopback", Deps{}, "127.0.0.1.nip.io", 421},
		{"remote address given", Deps{Hosts: []string{"dshd.lan"}}, "DSHD.lan:7433", 200},
		{"remote IPv6 address given", Deps{Hosts: []string{"[2001:db8::7]"}}, "[2001:db8::7]:7433", 200},
		{"another name than the remote one", Deps{Hosts: []string{"dshd.lan"}}, "rebind.example", 421},
		{"loopback still, with a remote address", Deps{Hosts: []string{"dshd.lan"}}, "127.0.0.1", 200},
		{"Unix socket", Deps{AnyHost: true}, "docker", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.deps
			d.Token, d.Spec, d.Logger = strings.Repeat("t", 32), contract.OpenAPI, discardLogger()
			h, err := NewServer(d)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			defer srv.Close()
			req, err := http.NewRequest("GET", srv.URL+"/healthz", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tt.host
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("Host %q = %d %s, want %d", tt.host, resp.StatusCode, b, tt.want)
			}
		})
	}
}
