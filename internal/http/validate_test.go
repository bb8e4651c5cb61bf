package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
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
		Env: f, Jobs: f, Pipeline: f, Agents: f, Workspaces: f, Hooks: f, Skills: skillsFailing{f}, MCP: f, Files: f,
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
			want := path
			if p, ok := strings.CutSuffix(path, "/{path}"); ok {
				// Hand-served: the {path} of the file routes holds
				// slashes, a chi wildcard.
				want = p + "/*"
			}
			if got := mux.Find(rctx, method, req.String()); got != want {
				t.Errorf("%s %s: chi finds pattern %q, want the contract's %q", method, req.String(), got, path)
				continue
			}
			for i, k := range rctx.URLParams.Keys {
				if k == "*" {
					k = "path"
				}
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

// TestNullOptionalFieldsAreRefused: every optional field of every request
// body without required fields, sent as null, is 400 before any handler
// runs (the failing fakes would answer otherwise). A field the contract
// gives a default took it in place of null (the validator fills defaults),
// as "workspace": null on fork and spawn once did; so no request field
// has a default in the contract, and none is nullable unless it says so.
func TestNullOptionalFieldsAreRefused(t *testing.T) {
	srv, f := newFailingServer(t)
	f.err = errors.New("the request reached a handler")
	doc, err := openapi3.NewLoader().LoadFromData(contract.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	tried := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			// The UI's sign-in routes exist only with a UI, which this
			// server has none of.
			if op.RequestBody == nil || op.RequestBody.Value == nil || strings.HasPrefix(path, "/ui/") {
				continue
			}
			mt := op.RequestBody.Value.Content.Get("application/json")
			if mt == nil || mt.Schema == nil || mt.Schema.Value == nil || len(mt.Schema.Value.Required) > 0 {
				continue
			}
			req := regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(path, "v_1")
			for name, prop := range mt.Schema.Value.Properties {
				if prop.Value != nil && prop.Value.Nullable {
					continue
				}
				tried[method+" "+path+" "+name] = true
				status, code := do(t, srv, method, req, fmt.Sprintf(`{%q: null}`, name))
				if status != http.StatusBadRequest || code != "bad_request" {
					t.Errorf("%s %s {%q: null} = %d %q, want 400 bad_request", method, path, name, status, code)
				}
			}
		}
	}
	for _, want := range []string{"POST /agents/{id}/fork workspace", "POST /agents/{id}/spawn workspace", "POST /agents/{id}/fork limits", "POST /agents sandbox"} {
		if !tried[want] {
			t.Errorf("%s was not tried (%d fields were)", want, len(tried))
		}
	}
}
