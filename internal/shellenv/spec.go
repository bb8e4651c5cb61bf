package shellenv

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Resolver kinds accepted in ResolverSpec.Kind, and the kind reported for
// built-in contributors.
const (
	KindStatic   = "static"
	KindTemplate = "template"
	KindWebhook  = "webhook"
	KindBuiltin  = "builtin"
)

// Agent is the agent an execution runs for.
type Agent struct {
	ID       string
	ParentID string // "" for a root agent
	RootID   string // "" is read as ID (a root is its own root)
	Cwd      string
	Depth    int
}

// Root returns the id of the agent's root: RootID, or the agent's own id
// when RootID is empty (a root is its own root). Templates and webhooks read
// the root through it alone.
func (a Agent) Root() string {
	if a.RootID != "" {
		return a.RootID
	}
	return a.ID
}

// Execution describes one bash run for which an overlay is collected.
type Execution struct {
	JobID      string
	Command    string
	Cwd        string
	Background bool
	Agent      *Agent // nil: no agent, so DSH_SESSION_ID is absent
}

// KeySpec declares one managed key and what it means.
type KeySpec struct{ Key, Description string }

// ResolverSpec says how a contributor computes its values.
type ResolverSpec struct {
	Kind    string            // KindStatic, KindTemplate or KindWebhook
	Values  map[string]string // static and template: key → value or template
	URL     string            // webhook: http or https URL
	Timeout time.Duration     // webhook: 0 = registry default; can only shorten it
}

// Spec is a request to register a contributor.
type Spec struct {
	Name     string
	Plugin   string // plugin id; "" = durable contributor
	Keys     []KeySpec
	Resolver ResolverSpec
}

// Declaration is one declared key, as listed without running any resolver.
type Declaration struct {
	Key         string
	Description string
	Contributor string
	Builtin     bool
	Plugin      string     // plugin id, "" if none
	ExpiresAt   *time.Time // plugin lease expiry, nil if none; shared, do not modify
	// Kind is the contributor's resolver kind, or KindBuiltin.
	Kind string
	// Template is the key's template for a template contributor, else "".
	Template string
	// WebhookURL is a webhook contributor's URL with no credentials, query
	// or fragment (they may hold secrets), else "".
	WebhookURL string
}

// Contributor is a registered contributor.
type Contributor struct {
	Name      string
	Plugin    string // plugin id, "" if durable or built-in
	Kind      string // a resolver kind, or KindBuiltin
	Builtin   bool
	Keys      []KeySpec    // sorted by key
	Resolver  ResolverSpec // zero for built-ins
	CreatedAt time.Time
	ExpiresAt *time.Time // plugin lease expiry, nil if none
}

// clone returns a deep copy of c.
func (c Contributor) clone() Contributor {
	c.Keys = slices.Clone(c.Keys)
	if c.Resolver.Values != nil {
		m := make(map[string]string, len(c.Resolver.Values))
		for k, v := range c.Resolver.Values {
			m[k] = v
		}
		c.Resolver.Values = m
	}
	if c.ExpiresAt != nil {
		t := *c.ExpiresAt
		c.ExpiresAt = &t
	}
	return c
}

// fact is an execution fact a template can name.
type fact uint8

const (
	factNone fact = iota
	factAgentID
	factAgentParentID
	factAgentRootID
	factAgentCwd
	factAgentDepth
	factJobID
	factJobCwd
	factJobBackground
	numFacts
)

// name returns the placeholder name of f, "" for factNone.
func (f fact) name() string {
	switch f {
	case factAgentID:
		return "agent.id"
	case factAgentParentID:
		return "agent.parentId"
	case factAgentRootID:
		return "agent.rootId"
	case factAgentCwd:
		return "agent.cwd"
	case factAgentDepth:
		return "agent.depth"
	case factJobID:
		return "job.id"
	case factJobCwd:
		return "job.cwd"
	case factJobBackground:
		return "job.background"
	}
	return ""
}

// lookupFact returns the fact named name, or factNone. It runs only at
// registration; Collect never parses.
func lookupFact(name string) fact {
	for f := factAgentID; f < numFacts; f++ {
		if f.name() == name {
			return f
		}
	}
	return factNone
}

// TemplateFacts returns the placeholder names a template may use, sorted.
// A template writes one as "{agent.id}"; "{{" and "}}" stand for literal
// braces.
func TemplateFacts() []string {
	out := make([]string, 0, numFacts-1)
	for f := factAgentID; f < numFacts; f++ {
		out = append(out, f.name())
	}
	slices.Sort(out)
	return out
}

// facts holds the fact values of one execution. A fact is absent when the
// execution has no agent or when its value is empty.
type facts struct {
	v       [numFacts]string
	present [numFacts]bool
}

func (f *facts) set(k fact, v string) {
	if v != "" {
		f.v[k], f.present[k] = v, true
	}
}

func newFacts(x *Execution) facts {
	var f facts
	f.set(factJobID, x.JobID)
	f.set(factJobCwd, x.Cwd)
	if x.Background {
		f.set(factJobBackground, "true")
	} else {
		f.set(factJobBackground, "false")
	}
	if a := x.Agent; a != nil {
		f.set(factAgentID, a.ID)
		f.set(factAgentParentID, a.ParentID)
		f.set(factAgentRootID, a.Root())
		f.set(factAgentCwd, a.Cwd)
		f.set(factAgentDepth, itoa(a.Depth))
	}
	return f
}

// itoa avoids an allocation for the small depths agents actually have.
func itoa(n int) string {
	if n >= 0 && n < 10 {
		return "0123456789"[n : n+1]
	}
	return fmt.Sprint(n)
}

// segment is a literal (fact == factNone) or a fact reference.
type segment struct {
	lit  string
	fact fact
}

// template is a parsed template value; render needs no parsing.
type template struct {
	segs   []segment
	litLen int
}

// parseTemplate parses s. It returns the unknown placeholder names and
// whether a "{" was left unclosed.
func parseTemplate(s string) (t template, unknown []string, unclosed bool) {
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.segs = append(t.segs, segment{lit: lit.String()})
			t.litLen += lit.Len()
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			lit.WriteByte('}')
			i++
		case c == '{':
			end := strings.IndexByte(s[i+1:], '}')
			if end < 0 {
				return t, unknown, true
			}
			name := s[i+1 : i+1+end]
			f := lookupFact(name)
			if f == factNone {
				unknown = append(unknown, name)
			} else {
				flush()
				t.segs = append(t.segs, segment{fact: f})
			}
			i += end + 1
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return t, unknown, false
}

// constant reports whether t has no placeholders, and its value.
func (t *template) constant() (string, bool) {
	var b strings.Builder
	for _, s := range t.segs {
		if s.fact != factNone {
			return "", false
		}
		b.WriteString(s.lit)
	}
	return b.String(), true
}

// render evaluates t; ok is false when a named fact is absent.
func (t *template) render(f *facts) (string, bool) {
	if len(t.segs) == 1 {
		s := t.segs[0]
		if s.fact == factNone {
			return s.lit, true
		}
		return f.v[s.fact], f.present[s.fact]
	}
	n := t.litLen
	for _, s := range t.segs {
		if s.fact != factNone {
			if !f.present[s.fact] {
				return "", false
			}
			n += len(f.v[s.fact])
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range t.segs {
		if s.fact == factNone {
			b.WriteString(s.lit)
		} else {
			b.WriteString(f.v[s.fact])
		}
	}
	return b.String(), true
}

// compiled is a validated Spec ready to become an entry.
type compiled struct {
	c         Contributor
	templates map[string]*template // template kind only
}

// compileSpec validates s without looking at registry state. It returns the
// compiled contributor, every problem found (reserved keys included) and
// whether every problem is a reserved key.
func compileSpec(s Spec) (cp compiled, problems []string, onlyReserved bool) {
	var p problemList
	p.checkName(s.Name)
	keys, declared, reserved := p.checkKeys(s.Keys)
	templates := p.checkResolver(s.Resolver, declared)
	r := s.Resolver
	var values map[string]string
	if len(r.Values) > 0 {
		values = make(map[string]string, len(r.Values))
		for k, v := range r.Values {
			values[k] = v
		}
	}
	cp = compiled{
		c: Contributor{
			Name:   s.Name,
			Plugin: s.Plugin,
			Kind:   r.Kind,
			Keys:   keys,
			Resolver: ResolverSpec{
				Kind: r.Kind, Values: values, URL: r.URL, Timeout: r.Timeout,
			},
		},
		templates: templates,
	}
	return cp, p, len(p) > 0 && reserved == len(p)
}

// problemList collects what is wrong with a Spec, in the order found: name,
// keys, resolver.
type problemList []string

func (p *problemList) addf(format string, args ...any) {
	*p = append(*p, fmt.Sprintf(format, args...))
}

// checkName checks a contributor's name.
func (p *problemList) checkName(name string) {
	switch {
	case strings.TrimSpace(name) == "":
		p.addf("name is required")
	case !IsValidName(name):
		p.addf("name %q is malformed: use 1 to %d lowercase letters, digits, '.', '_' or '-', starting with a letter or digit", name, MaxNameLen)
	case strings.HasPrefix(name, builtinNamePrefix):
		p.addf("name %q uses the prefix %q reserved for built-in contributors", name, builtinNamePrefix)
	}
}

// checkKeys checks the declared keys and returns them sorted and without
// duplicates, the set of declared names, and how many problems were
// reserved keys.
func (p *problemList) checkKeys(specs []KeySpec) (keys []KeySpec, declared map[string]bool, reserved int) {
	if len(specs) == 0 {
		p.addf("at least one key must be declared")
	}
	declared = make(map[string]bool, len(specs))
	keys = make([]KeySpec, 0, len(specs))
	for i, k := range specs {
		switch {
		case k.Key == "":
			p.addf("keys[%d]: key is required", i)
		case !IsValidKey(k.Key):
			p.addf("keys[%d]: key %q does not match ^%s[A-Z][A-Z0-9_]*$", i, k.Key, Prefix)
		case IsReservedKey(k.Key):
			p.addf("keys[%d]: key %s is reserved", i, k.Key)
			reserved++
		case declared[k.Key]:
			p.addf("keys[%d]: key %s is declared more than once", i, k.Key)
		}
		if strings.TrimSpace(k.Description) == "" {
			p.addf("keys[%d]: description is required", i)
		} else if strings.IndexByte(k.Description, 0) >= 0 {
			p.addf("keys[%d]: description contains a NUL byte", i)
		}
		if k.Key != "" && !declared[k.Key] {
			declared[k.Key] = true
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b KeySpec) int { return strings.Compare(a.Key, b.Key) })
	return keys, declared, reserved
}

// checkResolver checks the resolver against the declared keys and returns
// the parsed templates of a template resolver.
func (p *problemList) checkResolver(r ResolverSpec, declared map[string]bool) map[string]*template {
	switch r.Kind {
	case KindStatic, KindTemplate:
		return p.checkValues(r, declared)
	case KindWebhook:
		if len(r.Values) > 0 {
			p.addf("resolver: values are not allowed for %s resolvers", KindWebhook)
		}
		if r.URL == "" {
			p.addf("resolver: url is required for %s resolvers", KindWebhook)
		} else if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.addf("resolver: url %q is not an absolute http or https URL", r.URL)
		}
		if r.Timeout < 0 {
			p.addf("resolver: timeout must not be negative")
		}
	case "":
		p.addf("resolver: kind is required (%s, %s or %s)", KindStatic, KindTemplate, KindWebhook)
	default:
		p.addf("resolver: unknown kind %q (want %s, %s or %s)", r.Kind, KindStatic, KindTemplate, KindWebhook)
	}
	return nil
}

// checkValues checks the values of a static or template resolver, in key
// order, and parses templates.
func (p *problemList) checkValues(r ResolverSpec, declared map[string]bool) map[string]*template {
	if r.URL != "" {
		p.addf("resolver: url is only allowed for %s resolvers", KindWebhook)
	}
	if r.Timeout != 0 {
		p.addf("resolver: timeout is only allowed for %s resolvers", KindWebhook)
	}
	var templates map[string]*template
	if r.Kind == KindTemplate {
		templates = make(map[string]*template, len(r.Values))
	}
	valueKeys := make([]string, 0, len(r.Values))
	for k := range r.Values {
		valueKeys = append(valueKeys, k)
	}
	slices.Sort(valueKeys)
	for _, k := range valueKeys {
		v := r.Values[k]
		if !declared[k] {
			p.addf("resolver: values name undeclared key %q", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			p.addf("resolver: value of %s contains a NUL byte", k)
		}
		if r.Kind == KindTemplate {
			t, unknown, unclosed := parseTemplate(v)
			for _, u := range unknown {
				p.addf("resolver: template of %s uses unknown placeholder {%s}", k, u)
			}
			if unclosed {
				p.addf("resolver: template of %s has an unclosed '{'", k)
			}
			templates[k] = &t
		}
	}
	return templates
}

// RedactURL returns raw without its user information, query and fragment,
// the parts of a webhook URL that may carry a secret, so the URL can be shown.
// A URL that does not parse is shown as nothing at all.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}
