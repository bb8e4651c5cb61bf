package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// `make test` runs the contract fuzz test with these defaults; `make fuzz`
// runs it longer with a fresh seed (printed, so a failure can be replayed).
var (
	fuzzSeed  = flag.Uint64("contract.seed", 1, "seed of TestContractFuzz")
	fuzzCount = flag.Int("contract.count", 600, "requests TestContractFuzz sends")
)

// TestContractFuzz drives every operation of api/openapi.yaml through the
// real server with requests generated from the contract's own schemas: valid
// ones, and ones with a single mutation that makes them invalid (a required
// member dropped, a wrong type, a value out of range or too long, an
// unknown member, bad UTF-8, a lone surrogate, a second value, a duplicate
// member, a cut body, a wrong Content-Type, a bad parameter, no token, a
// foreign Host). Every answer must be declared by the contract for its
// operation and match it (openapi3filter.ValidateResponse), no answer may be
// a 5xx, and no invalid request may succeed.
//
// Values with side effects come from fixed pools instead of random text:
// commands are short and harmless and run in a temporary directory, webhook
// URLs point at a loopback server that answers at once, ids are mostly ones
// the run created.
func TestContractFuzz(t *testing.T) {
	doc := loadContract(t)
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
	// The contract serves itself as a document (a string), not as the data
	// its YAML would parse to.
	openapi3filter.RegisterBodyDecoder("application/yaml", openapi3filter.PlainBodyDecoder)
	// The file routes' bytes.
	openapi3filter.RegisterBodyDecoder("application/x-tar", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/octet-stream", openapi3filter.PlainBodyDecoder)

	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
	}))
	t.Cleanup(hook.Close)

	// An agent made without a cwd works in the server's: a directory of
	// the test's own, never this package's sources (a recursive DELETE of
	// the fuzz's drawing would remove them).
	t.Chdir(t.TempDir())
	s := startServer(t)
	seed, count := *fuzzSeed, *fuzzCount
	t.Logf("contract fuzz: seed %d, %d requests", seed, count)
	f := &fuzzer{
		t: t, s: s, doc: doc, hookURL: hook.URL,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		dir:    t.TempDir(),
		client: &http.Client{Timeout: 60 * time.Second},
		ids:    map[string][]string{},
		tools:  map[string]*openapi3.Schema{},
		counts: map[string]map[int]int{},
	}
	f.seedState()
	ops := f.operations()

	for i := 0; i < count; i++ {
		op := ops[i%len(ops)]
		if i%len(ops) == 0 {
			f.rng.Shuffle(len(ops), func(a, b int) { ops[a], ops[b] = ops[b], ops[a] })
			op = ops[0]
		}
		c := f.build(op, f.rng.IntN(2) == 0)
		f.send(op, c)
		if t.Failed() && i > 0 && f.failures >= 10 {
			t.Fatalf("stopping after %d failures (seed %d)", f.failures, seed)
		}
	}
	for _, op := range ops {
		key := op.method + " " + op.path
		if len(f.counts[key]) == 0 {
			t.Errorf("%s was never exercised", key)
		}
	}
	var lines []string
	for k, byStatus := range f.counts {
		lines = append(lines, fmt.Sprintf("%s %v", k, byStatus))
	}
	sort.Strings(lines)
	t.Logf("statuses by operation:\n%s", strings.Join(lines, "\n"))
}

// operation is one method of one path of the contract.
type operation struct {
	method, path string
	item         *openapi3.PathItem
	op           *openapi3.Operation
}

// fuzzCase is one generated request.
type fuzzCase struct {
	path     string // with parameters filled in and escaped
	query    url.Values
	header   http.Header
	body     []byte
	hasBody  bool
	host     string
	noAuth   bool
	mutation string // "" for a valid request
	raw      bool   // the body is bytes, not JSON (the file routes)
	mustFail bool   // the mutation makes the request invalid for sure
}

type fuzzer struct {
	t       *testing.T
	s       *testServer
	doc     *openapi3.T
	rng     *rand.Rand
	dir     string
	hookURL string
	client  *http.Client

	ids      map[string][]string         // known ids by kind: agent, job, plugin, contributor
	tools    map[string]*openapi3.Schema // tool argument schemas, from GET /tools
	counts   map[string]map[int]int      // statuses seen, by operation
	tool     string                      // the tool a request being built calls
	serial   int
	failures int
}

func (f *fuzzer) operations() []operation {
	var ops []operation
	for _, p := range f.doc.Paths.InMatchingOrder() {
		item := f.doc.Paths.Value(p)
		for method, op := range item.Operations() {
			ops = append(ops, operation{method: method, path: p, item: item, op: op})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].path+ops[i].method < ops[j].path+ops[j].method })
	if len(ops) == 0 {
		f.t.Fatal("the contract has no operations")
	}
	return ops
}

// seedState creates one of each resource, so that generated requests can
// name existing ones, and reads the tools' argument schemas.
func (f *fuzzer) seedState() {
	t := f.t
	var a struct{ ID string }
	if st := f.s.DoJSON(t, "POST", "/agents", map[string]any{"cwd": f.dir}, &a); st != 201 {
		t.Fatalf("create agent = %d", st)
	}
	f.remember("agent", a.ID)
	var j struct{ ID string }
	if st := f.s.DoJSON(t, "POST", "/exec", map[string]any{"command": "echo seed", "cwd": f.dir}, &j); st != 200 {
		t.Fatalf("exec = %d", st)
	}
	f.remember("job", j.ID)
	var p struct{ ID string }
	if st := f.s.DoJSON(t, "POST", "/plugins", map[string]any{"name": "fuzz"}, &p); st != 201 {
		t.Fatalf("open plugin = %d", st)
	}
	f.remember("plugin", p.ID)
	f.remember("contributor", "dsh.home")
	var defs []struct {
		Name        string          `json:"name"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if st := f.s.DoJSON(t, "GET", "/tools?format=anthropic", nil, &defs); st != 200 || len(defs) == 0 {
		t.Fatalf("GET /tools = %d with %d tools", st, len(defs))
	}
	for _, d := range defs {
		var sch openapi3.Schema
		if err := json.Unmarshal(d.InputSchema, &sch); err != nil {
			t.Fatalf("tool %s schema: %v", d.Name, err)
		}
		f.tools[d.Name] = &sch
	}
}

// forget drops an id that no longer names anything.
func (f *fuzzer) forget(kind, id string) {
	f.ids[kind] = slices.DeleteFunc(f.ids[kind], func(s string) bool { return s == id })
}

func (f *fuzzer) remember(kind, id string) {
	if id == "" || slices.Contains(f.ids[kind], id) {
		return
	}
	f.ids[kind] = append(f.ids[kind], id)
	if len(f.ids[kind]) > 20 {
		f.ids[kind] = f.ids[kind][1:]
	}
}

// known picks an id of kind the run created, or "" when there is none.
func (f *fuzzer) known(kind string) string {
	if ids := f.ids[kind]; len(ids) > 0 {
		return ids[f.rng.IntN(len(ids))]
	}
	return ""
}

// commands are what generated requests run: short, harmless, and varied in
// what they do to the job (output on both streams, exit codes, signals,
// stdin, a little waiting, more output than the in-memory capture).
var commands = []string{
	"true", "echo fuzz", "exit 3", "printf 'a\\nb'", "echo err >&2", "sleep 0.2", "cat", "pwd",
	"echo $DSH_SESSION_ID", "kill -TERM $$", "seq 1 30000", "env | grep ^DSH_ | sort", "printf 'caf\\xc3\\xa9\\n'",
	"printf 'A\\xe2'", "head -c 3000 /dev/urandom",
}

func (f *fuzzer) pick(xs []string) string { return xs[f.rng.IntN(len(xs))] }

// build generates a request for op: valid, or with one mutation when mutate.
func (f *fuzzer) build(op operation, mutate bool) fuzzCase {
	c := fuzzCase{query: url.Values{}, header: http.Header{}}
	params := append(openapi3.Parameters{}, op.item.Parameters...)
	params = append(params, op.op.Parameters...)
	pathVals := map[string]string{}
	for _, pr := range params {
		p := pr.Value
		if p.In != "query" && p.In != "header" && p.In != "path" {
			continue
		}
		if p.In != "path" && !p.Required && f.rng.IntN(2) == 0 {
			continue
		}
		v := f.paramValue(op, p)
		switch p.In {
		case "path":
			pathVals[p.Name] = v
		case "query":
			c.query.Set(p.Name, v)
		case "header":
			c.header.Set(p.Name, v)
		}
	}
	f.tool = pathVals["name"]
	var body any
	if rb := op.op.RequestBody; rb != nil && (rb.Value.Required || f.rng.IntN(2) == 0) {
		c.hasBody = true
		if mt := rb.Value.Content.Get("application/json"); mt != nil {
			body = f.value(mt.Schema, "", op, 0)
			c.header.Set("Content-Type", "application/json")
		} else {
			// The file routes take bytes (a file, a tar stream): any
			// bytes are a valid body, so no body mutation applies.
			c.raw = true
			c.body = f.rawBody(rb.Value.Content)
		}
	}

	if mutate {
		f.mutate(op, &c, params, pathVals, &body)
	}
	if c.hasBody && c.body == nil {
		b, err := json.Marshal(body)
		if err != nil {
			f.t.Fatal(err)
		}
		c.body = b
	}
	if c.hasBody && c.mutation != "" {
		c.body = f.mutateBytes(&c)
	}
	path := op.path
	for k, v := range pathVals {
		path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v))
	}
	c.path = path
	return c
}

// paramValue is a valid value for a parameter: a known id for ids, else
// one generated from its schema.
func (f *fuzzer) paramValue(op operation, p *openapi3.Parameter) string {
	if p.In == "path" && p.Name == "path" {
		// A file route's path: relative names below the agents' cwd
		// only (the server's default policy writes anywhere).
		return f.pick([]string{"", "fz.txt", "fz/a.txt", "fz", "missing/x", ".git/x"})
	}
	if p.In == "path" && f.rng.IntN(5) > 0 {
		switch {
		case p.Name == "name" && strings.HasPrefix(op.path, "/contributors"):
			return f.known("contributor")
		case p.Name == "name":
			return f.pick(append(mapKeys(f.tools), "no_such_tool"))
		case strings.HasPrefix(op.path, "/agents"):
			return f.known("agent")
		case strings.HasPrefix(op.path, "/jobs"):
			return f.known("job")
		case strings.HasPrefix(op.path, "/plugins"):
			return f.known("plugin")
		}
	}
	switch p.Name {
	case "Last-Event-ID":
		return f.pick([]string{"0.0", "3.0", "10.5", "x", strconv.Itoa(f.rng.IntN(100000)) + ".0"})
	case "Idempotency-Key":
		// Unique: a key reused with another body is issue 11's finding 6,
		// whose fix changes what the answer should be.
		f.serial++
		return "key-" + strconv.Itoa(f.serial)
	case "agentId":
		if f.rng.IntN(2) == 0 {
			return f.known("agent")
		}
	case "to":
		// A move's target: relative names below the agents' cwd, as for
		// {path} (an agent made without a cwd works in the test's
		// directory).
		return f.pick([]string{"fz2.txt", "fz/b.txt", "fz", "missing/y", ".git/y"})
	case "watch":
		// A watch streams until the client leaves: the fuzzer reads whole
		// answers, so it only ever asks for none.
		return "false"
	case "waitMs":
		return strconv.Itoa(f.rng.IntN(1500))
	case "offset":
		return strconv.Itoa(f.rng.IntN(100000))
	}
	v := f.value(p.Schema, p.Name, op, 0)
	switch v := v.(type) {
	case string:
		if p.In == "header" {
			return asciiOnly(v, "h")
		}
		return v
	default:
		return fmt.Sprint(v)
	}
}

// value generates a valid value for schema; name is the member it is for.
func (f *fuzzer) value(ref *openapi3.SchemaRef, name string, op operation, depth int) any {
	if ref == nil || ref.Value == nil {
		return "x"
	}
	sch := ref.Value
	if v, ok := f.special(ref, name, op); ok {
		return v
	}
	if len(sch.Enum) > 0 {
		return sch.Enum[f.rng.IntN(len(sch.Enum))]
	}
	if alts := append(append(openapi3.SchemaRefs{}, sch.OneOf...), sch.AnyOf...); len(alts) > 0 {
		return f.value(alts[f.rng.IntN(len(alts))], name, op, depth)
	}
	switch {
	case sch.Type.Is("object"):
		obj := map[string]any{}
		for _, pname := range mapKeys(sch.Properties) {
			pref := sch.Properties[pname]
			if slices.Contains(sch.Required, pname) || (depth < 4 && f.rng.IntN(2) == 0) {
				obj[pname] = f.value(pref, pname, op, depth+1)
			}
		}
		if ap := sch.AdditionalProperties.Schema; ap != nil && depth < 4 {
			for range f.rng.IntN(3) {
				obj[f.envName()] = f.value(ap, "", op, depth+1)
			}
		}
		f.fixObject(ref, obj)
		return obj
	case sch.Type.Is("array"):
		n := f.rng.IntN(3)
		if sch.MaxItems != nil && uint64(n) > *sch.MaxItems {
			n = int(*sch.MaxItems)
		}
		arr := []any{}
		for range n {
			arr = append(arr, f.value(sch.Items, name, op, depth+1))
		}
		return arr
	case sch.Type.Is("integer"):
		lo, hi := 0, 1000
		if sch.Min != nil {
			lo = int(*sch.Min)
		}
		if sch.Max != nil && int(*sch.Max) < hi+lo {
			hi = int(*sch.Max) - lo
		}
		return lo + f.rng.IntN(hi+1)
	case sch.Type.Is("boolean"):
		return f.rng.IntN(2) == 0
	case sch.Type.Is("number"):
		return f.rng.Float64() * 100
	default:
		n := f.rng.IntN(12)
		if sch.MinLength > uint64(n) {
			n = int(sch.MinLength)
		}
		if sch.MaxLength != nil && uint64(n) > *sch.MaxLength {
			n = int(*sch.MaxLength)
		}
		return f.text(n)
	}
}

// special gives members with side effects values from the fixed pools, and
// tool arguments values from the tool's own schema.
func (f *fuzzer) special(ref *openapi3.SchemaRef, name string, op operation) (any, bool) {
	switch name {
	case "command":
		return f.pick(commands), true
	case "cwd", "workdir":
		return f.pick([]string{f.dir, f.dir, filepath.Join(f.dir, "missing"), "relative/dir"}), true
	case "url":
		return f.hookURL, true
	case "timeoutMs", "timeout":
		if op.path == "/contributors" {
			// A webhook timeout the loopback hook always meets.
			return 1000 + f.rng.IntN(4000), true
		}
		return 1 + f.rng.IntN(5000), true
	case "yieldMs", "waitMs":
		return f.rng.IntN(1000), true
	case "agentId":
		return f.known("agent"), true
	case "plugin":
		return f.known("plugin"), true
	case "jobId":
		return f.known("job"), true
	case "kind":
		if len(ref.Value.Enum) == 0 {
			return f.pick([]string{"static", "template", "webhook"}), true
		}
	case "key":
		return f.managedName(), true
	case "stdin":
		return f.text(f.rng.IntN(20)), true
	case "boundary":
		return f.rng.IntN(10), true
	case "leaseSeconds":
		return 60 + f.rng.IntN(600), true
	case "arguments":
		tool := f.tool
		if tool == "" || f.tools[tool] == nil {
			tool = f.pick(mapKeys(f.tools))
		}
		if sch := f.tools[tool]; sch != nil {
			return f.value(openapi3.NewSchemaRef("", sch), "", op, 1), true
		}
	}
	return nil, false
}

// fixObject makes generated contributor inputs coherent (the resolver's
// values name the declared keys), so that many of them register.
func (f *fuzzer) fixObject(ref *openapi3.SchemaRef, obj map[string]any) {
	if ref.Ref != "#/components/schemas/ContributorInput" {
		return
	}
	f.serial++
	obj["name"] = "fuzz.c" + strconv.Itoa(f.serial)
	keys, _ := obj["keys"].([]any)
	if len(keys) == 0 {
		keys = []any{map[string]any{"key": f.managedName(), "description": "fuzzed"}}
		obj["keys"] = keys
	}
	res, _ := obj["resolver"].(map[string]any)
	if res == nil {
		return
	}
	values := map[string]any{}
	for _, k := range keys {
		if km, ok := k.(map[string]any); ok {
			values[fmt.Sprint(km["key"])] = f.pick([]string{"v", "agent {agent.id}", "job {job.id} in {job.cwd}"})
		}
	}
	switch res["kind"] {
	case "webhook":
		delete(res, "values")
		res["url"] = f.hookURL
	default:
		res["values"] = values
		delete(res, "url")
		delete(res, "timeoutMs")
	}
}

func (f *fuzzer) managedName() string {
	return "DSH_FUZZ_" + strconv.Itoa(f.rng.IntN(400))
}

func (f *fuzzer) envName() string {
	return f.pick([]string{"FUZZ_A", "FUZZ_B", "LANG", "FUZZ_" + strconv.Itoa(f.rng.IntN(9))})
}

// text is n runes of varied text: ASCII, punctuation, accents, CJK, emoji.
func (f *fuzzer) text(n int) string {
	const alphabet = "abcXYZ019 ._-/~%:é漢😀\t\"\\'"
	runes := []rune(alphabet)
	var b strings.Builder
	for range n {
		b.WriteRune(runes[f.rng.IntN(len(runes))])
	}
	return b.String()
}

func asciiOnly(s, fallback string) string {
	var b strings.Builder
	for _, r := range s {
		if r > 0x20 && r < 0x7f {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return fallback
	}
	return b.String()
}

func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// rawBody is a body of bytes for one of the media types of content: a
// small tar stream or a few bytes.
func (f *fuzzer) rawBody(content openapi3.Content) []byte {
	if content.Get("application/x-tar") == nil {
		return []byte(f.pick([]string{"", "fuzz\n", "\x00\x01binary"}))
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	name := f.pick([]string{"fz.txt", "fz/b.txt", "../out", "/abs"})
	_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("fz\n"))
	_ = tw.Close()
	return b.Bytes()
}

// mutate applies one mutation that makes the request invalid.
func (f *fuzzer) mutate(op operation, c *fuzzCase, params openapi3.Parameters, pathVals map[string]string, body *any) {
	var choices []string
	if c.hasBody && !c.raw {
		choices = append(choices, "bad-utf8", "lone-surrogate", "second-value", "truncated", "wrong-content-type")
		if op.path == "/exec" {
			choices = append(choices, "nul")
		}
		if obj, ok := (*body).(map[string]any); ok {
			sch := op.op.RequestBody.Value.Content.Get("application/json").Schema.Value
			if len(sch.Required) > 0 {
				choices = append(choices, "drop-required")
			}
			if sch.AdditionalProperties.Has != nil && !*sch.AdditionalProperties.Has {
				choices = append(choices, "unknown-member")
			}
			if len(obj) > 0 {
				choices = append(choices, "duplicate-member", "wrong-type", "out-of-range", "too-long")
			}
		}
	}
	for _, pr := range params {
		p := pr.Value
		if p.Schema != nil && (p.Schema.Value.MaxLength != nil || len(p.Schema.Value.Enum) > 0 || p.Schema.Value.Type.Is("integer")) {
			choices = append(choices, "bad-param")
			break
		}
	}
	if open := op.op.Security != nil && len(*op.op.Security) == 0; !open {
		choices = append(choices, "no-token")
	}
	choices = append(choices, "foreign-host")
	if op.op.RequestBody == nil {
		choices = append(choices, "stray-body")
	}
	c.mutation = f.pick(choices)
	c.mustFail = true

	switch c.mutation {
	case "stray-body":
		// An operation that takes no body ignores one (and closes the
		// connection): the request stays valid.
		c.mustFail = false
		c.hasBody = true
		c.body = []byte(f.pick([]string{`{"command":"echo stray"}`, "{", "\xff", strings.Repeat("x", 2<<20)}))
		c.header.Set("Content-Type", f.pick([]string{"application/json", "text/plain"}))
	case "no-token":
		c.noAuth = true
	case "foreign-host":
		c.host = "rebind.example"
	case "wrong-content-type":
		c.header.Set("Content-Type", "text/plain")
	case "bad-param":
		var cands []*openapi3.Parameter
		for _, pr := range params {
			if s := pr.Value.Schema.Value; s.MaxLength != nil || len(s.Enum) > 0 || s.Type.Is("integer") {
				cands = append(cands, pr.Value)
			}
		}
		p := cands[f.rng.IntN(len(cands))]
		s := p.Schema.Value
		var v string
		switch {
		case s.MaxLength != nil:
			v = strings.Repeat("a", int(*s.MaxLength)+1)
		case len(s.Enum) > 0:
			v = "not-in-the-enum"
		case s.Max != nil && f.rng.IntN(2) == 0:
			v = strconv.FormatInt(int64(*s.Max)+1, 10)
		default:
			v = f.pick([]string{"-1", "1.5", "ten", "99999999999999999999999"})
			if s.Min == nil && v == "-1" {
				v = "ten"
			}
		}
		switch p.In {
		case "path":
			pathVals[p.Name] = v
		case "query":
			c.query.Set(p.Name, v)
		case "header":
			c.header.Set(p.Name, v)
		}
	case "drop-required", "unknown-member", "wrong-type", "out-of-range", "too-long", "duplicate-member":
		f.mutateObject(op, c, body)
	}
}

// mutateObject changes one member of the body object.
func (f *fuzzer) mutateObject(op operation, c *fuzzCase, body *any) {
	obj := (*body).(map[string]any)
	sch := op.op.RequestBody.Value.Content.Get("application/json").Schema.Value
	switch c.mutation {
	case "drop-required":
		delete(obj, sch.Required[f.rng.IntN(len(sch.Required))])
	case "unknown-member":
		obj["unknownMember"] = 1
	case "duplicate-member":
		// Marshalled by hand below: a map cannot hold the same name twice.
		k := mapKeys(obj)[0]
		first, _ := json.Marshal(map[string]any{k: obj[k]})
		rest, _ := json.Marshal(obj)
		c.body = append(first[:len(first)-1:len(first)-1], append([]byte(","), rest[1:]...)...)
	case "wrong-type", "out-of-range", "too-long":
		var names []string
		for _, k := range mapKeys(obj) {
			ps := sch.Properties[k]
			if ps == nil {
				continue
			}
			v := ps.Value
			switch c.mutation {
			case "wrong-type":
				if v.Type != nil && len(*v.Type) > 0 {
					names = append(names, k)
				}
			case "out-of-range":
				if v.Type.Is("integer") && (v.Min != nil || v.Max != nil) {
					names = append(names, k)
				}
			case "too-long":
				if v.Type.Is("string") && v.MaxLength != nil {
					names = append(names, k)
				}
			}
		}
		if len(names) == 0 {
			// Nothing of that kind in this body: spoil it another way.
			c.mutation = "second-value"
			return
		}
		k := names[f.rng.IntN(len(names))]
		v := sch.Properties[k].Value
		switch c.mutation {
		case "wrong-type":
			switch {
			case v.Type.Is("string"):
				obj[k] = f.pick([]string{"42", "true", "[]", "{}", "null"})
				obj[k] = json.RawMessage(obj[k].(string))
			case v.Type.Is("object"), v.Type.Is("array"):
				obj[k] = "not a container"
			default:
				obj[k] = "not a scalar of that type"
			}
		case "out-of-range":
			if v.Max != nil && (v.Min == nil || f.rng.IntN(2) == 0) {
				obj[k] = int64(*v.Max) + 1
			} else {
				obj[k] = int64(*v.Min) - 1
			}
		case "too-long":
			obj[k] = strings.Repeat("x", int(*v.MaxLength)+1)
		}
	}
}

// mutateBytes applies the mutations that only bytes can carry.
func (f *fuzzer) mutateBytes(c *fuzzCase) []byte {
	b := c.body
	insert := func(s string) []byte {
		i := bytes.Index(b, []byte(`:"`))
		if i < 0 {
			// No string member to spoil: spoil the whole body instead.
			return append([]byte(`"`+s+`"`), b...)
		}
		i += 2
		return append(append(append([]byte{}, b[:i]...), s...), b[i:]...)
	}
	switch c.mutation {
	case "bad-utf8":
		return insert("\xff\xfe")
	case "lone-surrogate":
		return insert(`\ud800`)
	case "nul":
		if bytes.Contains(b, []byte(`"command":"`)) {
			return bytes.Replace(b, []byte(`"command":"`), []byte(`"command":"\u0000`), 1)
		}
		c.mutation = "second-value"
		return append(b, []byte(` {}`)...)
	case "second-value":
		return append(b, []byte(` {}`)...)
	case "truncated":
		return b[:len(b)/2]
	}
	return b
}

// send sends c, checks the answer against the contract and learns ids.
func (f *fuzzer) send(op operation, c fuzzCase) {
	t := f.t
	u := f.s.URL + c.path
	if len(c.query) > 0 {
		u += "?" + c.query.Encode()
	}
	var body io.Reader
	if c.hasBody {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequest(strings.ToUpper(op.method), u, body)
	if err != nil {
		t.Fatalf("build %s %s: %v", op.method, u, err)
	}
	req.Header = c.header.Clone()
	if !c.noAuth {
		req.Header.Set("Authorization", "Bearer "+f.s.Token)
	}
	if c.host != "" {
		req.Host = c.host
	}
	what := fmt.Sprintf("%s %s (mutation %q) body %.300q", op.method, u, c.mutation, c.body)
	resp, err := f.client.Do(req)
	if err != nil {
		f.fail("%s: %v", what, err)
		return
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		f.fail("%s: read answer: %v", what, err)
		return
	}
	key := op.method + " " + op.path
	if f.counts[key] == nil {
		f.counts[key] = map[int]int{}
	}
	f.counts[key][resp.StatusCode]++

	if resp.StatusCode >= 500 {
		f.fail("%s = %d %s", what, resp.StatusCode, data)
	}
	if c.mustFail && resp.StatusCode < 400 {
		f.fail("%s = %d: an invalid request was accepted: %.300s", what, resp.StatusCode, data)
	}
	if c.mutation == "foreign-host" && resp.StatusCode != 421 {
		f.fail("%s = %d, want 421", what, resp.StatusCode)
	}
	route := &routers.Route{Spec: f.doc, Path: op.path, PathItem: op.item, Method: strings.ToUpper(op.method), Operation: op.op}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	sse := ct == "text/event-stream"
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(data)),
		// The schema of an event stream describes each event: the events
		// are checked one by one below.
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: sse},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		f.fail("%s = %d %.500s\nnot as the contract says: %v", what, resp.StatusCode, data, err)
	}
	if sse {
		for _, err := range checkEvents(eventSchema(f.t, op.op, resp.StatusCode), data) {
			f.fail("%s = %d: %v", what, resp.StatusCode, err)
		}
	}
	if resp.StatusCode < 300 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		f.learn(op, data)
	}
	// A plugin or contributor deleted (or expired) is no longer an id to use.
	if id, err := url.PathUnescape(strings.Split(c.path, "/")[len(strings.Split(op.path, "/"))-1:][0]); err == nil &&
		(resp.StatusCode == 404 || (resp.StatusCode == 204 && op.method == http.MethodDelete)) {
		switch {
		case strings.HasPrefix(op.path, "/plugins/{id}"):
			f.forget("plugin", id)
		case op.path == "/contributors/{name}":
			f.forget("contributor", id)
		}
	}
}

// learn remembers the ids a successful answer names.
func (f *fuzzer) learn(op operation, data []byte) {
	var one struct {
		ID    string `json:"id"`
		Name  string `json:"name"`
		JobID string `json:"jobId"`
	}
	if json.Unmarshal(data, &one) != nil {
		return
	}
	switch {
	case op.path == "/exec":
		f.remember("job", one.ID)
	case strings.HasSuffix(op.path, "/tools/{name}"):
		f.remember("job", one.JobID)
	case op.method == http.MethodPost && strings.HasPrefix(op.path, "/agents"):
		f.remember("agent", one.ID)
	case op.path == "/plugins" && op.method == http.MethodPost:
		f.remember("plugin", one.ID)
	case op.path == "/contributors" && op.method == http.MethodPost:
		f.remember("contributor", one.Name)
	}
}

func (f *fuzzer) fail(format string, args ...any) {
	f.t.Helper()
	f.failures++
	f.t.Errorf(format, args...)
}
