package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/go-chi/chi/v5"
)

// contractValidator checks each request against the contract with
// kin-openapi before any handler sees it. It finds a request's operation in
// the server's own chi tree, where the contract's paths are registered with
// the same templates, instead of a second router: one walk of a radix tree
// instead of a regular expression per route, tried in turn, which in a
// request that finds its caches cold (every one after a command ran) was
// the largest part of its decoding.
type contractValidator struct {
	mux    *chi.Mux
	routes map[string]*routers.Route // by method and chi pattern: "POST /exec"
	opts   *openapi3filter.Options
	skip   func(*http.Request) bool
	fail   func(w http.ResponseWriter, r *http.Request, err error)
}

// newContractValidator indexes doc's operations for mux. Every path of the
// contract must be one chi can register as it is ({name} parameters only).
func newContractValidator(doc *openapi3.T, mux *chi.Mux, opts *openapi3filter.Options, skip func(*http.Request) bool, fail func(http.ResponseWriter, *http.Request, error)) (*contractValidator, error) {
	v := &contractValidator{mux: mux, routes: map[string]*routers.Route{}, opts: opts, skip: skip, fail: fail}
	for path, item := range doc.Paths.Map() {
		if strings.ContainsAny(path, "*?#") || !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("contract path %q: not a chi pattern", path)
		}
		for method, op := range item.Operations() {
			v.routes[method+" "+path] = &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}
		}
	}
	return v, nil
}

// errNoOperation: the request names no operation of the contract.
var errNoOperation = errors.New("no operation of the contract")

// handler is the validating middleware.
func (v *contractValidator) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v.skip(r) {
			next.ServeHTTP(w, r)
			return
		}
		rctx := chi.NewRouteContext()
		route := v.routes[r.Method+" "+v.mux.Find(rctx, r.Method, r.URL.Path)]
		if route == nil {
			v.fail(w, r, v.notFound(r))
			return
		}
		var params map[string]string
		if n := len(rctx.URLParams.Keys); n > 0 {
			params = make(map[string]string, n)
			for i, k := range rctx.URLParams.Keys {
				params[k] = rctx.URLParams.Values[i]
			}
		}
		err := openapi3filter.ValidateRequest(r.Context(), &openapi3filter.RequestValidationInput{
			Request: r, PathParams: params, Route: route, Options: v.opts,
		})
		if err != nil {
			v.fail(w, r, invalidRequest(err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// notFound tells a path no operation has (404) from an operation's path
// asked with another method (405).
func (v *contractValidator) notFound(r *http.Request) error {
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		if p := v.mux.Find(chi.NewRouteContext(), m, r.URL.Path); v.routes[m+" "+p] != nil {
			return errMethodNotAllowed
		}
	}
	return errNotFound
}

// invalidRequest maps a validation failure to the problem it answers: the
// request's fault (400) with the first line of kin-openapi's message, or,
// for anything the validator could not decide, a server error.
func invalidRequest(err error) error {
	var re *openapi3filter.RequestError
	if !errors.As(err, &re) {
		return fmt.Errorf("validate request: %w", err)
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return fmt.Errorf("%w: %s", errBadRequest, msg)
}

// leaveSecurityToAuthenticate drops the security requirements from the
// validator's copy of the contract. s.authenticate has checked every
// request against them before the validator sees it; left in, the
// validator would check each again with an authentication function that
// accepts all, after reading the body once more for it.
func leaveSecurityToAuthenticate(doc *openapi3.T) {
	doc.Security = nil
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			op.Security = nil
		}
	}
}
