package tests

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// loadContract loads and validates api/openapi.yaml.
func loadContract(t testing.TB) *openapi3.T {
	t.Helper()
	b, err := os.ReadFile("../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return doc
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// TestEveryOperationDeclaresWhatAuthAnswers sends every operation of the
// contract to the real server without a token. Operations that need one
// must answer 401 and declare it; the open ones must answer 2xx. Either way
// the status answered must be declared for that operation.
func TestEveryOperationDeclaresWhatAuthAnswers(t *testing.T) {
	doc := loadContract(t)
	s := startServer(t)
	paths := doc.Paths.InMatchingOrder()
	sort.Strings(paths)
	n := 0
	for _, p := range paths {
		for method, op := range doc.Paths.Value(p).Operations() {
			n++
			open := op.Security != nil && len(*op.Security) == 0
			url := pathParam.ReplaceAllString(p, "x")
			resp := s.doWith(t, method, url, nil, map[string]string{})
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got := resp.StatusCode
			switch {
			case open && (got < 200 || got > 299):
				t.Errorf("%s %s (open) without a token = %d, want 2xx", method, p, got)
			case !open && got != http.StatusUnauthorized:
				t.Errorf("%s %s without a token = %d, want 401", method, p, got)
			}
			if op.Responses.Value(strconv.Itoa(got)) == nil {
				t.Errorf("%s %s answered %d, which the contract does not declare for it", method, p, got)
			}
		}
	}
	if n < 25 {
		t.Errorf("checked %d operations; the contract lost some", n)
	}
}
