package httpapi

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	contract "github.com/dshd/dshd/api"
)

// TestValidatorFindsEveryOperation: the validator finds a request's
// operation in the server's chi tree by the pattern it was registered with,
// so every operation of the contract must be registered under its contract
// path, parameters named alike. A path that chi registered differently (or
// not at all) would answer 404 for a request the contract allows.
func TestValidatorFindsEveryOperation(t *testing.T) {
	f := &failing{}
	h, err := NewServer(Deps{
		Logger: discardLogger(), Token: testToken, Spec: contract.OpenAPI,
		Env: f, Jobs: f, Pipeline: f, Agents: f, Workspaces: f, Hooks: f, Skills: skillsFailing{f}, MCP: f,
		// Every optional route registered.
		Gatherer: prometheus.NewRegistry(), UI: fstest.MapFS{"index.html": {Data: []byte("<p>")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux, ok := h.(*chi.Mux)
	if !ok {
		t.Fatalf("the server's handler is a %T, not the chi mux", h)
	}
	doc, err := openapi3.NewLoader().LoadFromData(contract.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for path, item := range doc.Paths.Map() {
		// A request path: each {param} replaced by a value.
		var req strings.Builder
		for seg := range strings.SplitSeq(strings.TrimPrefix(path, "/"), "/") {
			req.WriteString("/")
			if strings.HasPrefix(seg, "{") {
				req.WriteString("v_" + strings.Trim(seg, "{}"))
			} else {
				req.WriteString(seg)
			}
		}
		for method := range item.Operations() {
			n++
			rctx := chi.NewRouteContext()
			if got := mux.Find(rctx, method, req.String()); got != path {
				t.Errorf("%s %s: chi finds pattern %q, want the contract's %q", method, req.String(), got, path)
				continue
			}
			for i, k := range rctx.URLParams.Keys {
				if want := "v_" + k; rctx.URLParams.Values[i] != want {
					t.Errorf("%s %s: parameter %s = %q, want %q", method, path, k, rctx.URLParams.Values[i], want)
				}
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d operations in the contract", n)
	}
}
