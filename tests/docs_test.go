package tests

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocsLinks checks that every relative link of the repository's
// Markdown pages (README.md, docs/, the clients' and examples' READMEs)
// names a file or directory that exists, and that every #anchor names a
// heading of the page it points into, as GitHub makes its anchors.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	pages := markdownPages(t, "..")
	if len(pages) < 10 {
		t.Fatalf("found %d Markdown pages, want README.md and the pages of docs/: %v", len(pages), pages)
	}
	anchors := map[string]map[string]bool{}
	for _, p := range pages {
		anchors[p] = headingAnchors(readPage(t, p))
	}
	links := 0
	for _, p := range pages {
		for _, l := range pageLinks(readPage(t, p)) {
			links++
			if err := checkLink(p, l, anchors); err != nil {
				t.Errorf("%s:%d: link %q: %v", shown(p), l.line, l.target, err)
			}
		}
	}
	if links < 50 {
		t.Errorf("found %d relative links in %d pages; the link parser has stopped finding them", links, len(pages))
	}
}

// TestGitHubSlug checks the anchor rule against headings whose anchors
// GitHub is known to make.
func TestGitHubSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Quick start":                                     "quick-start",
		"Security model, in plain words":                  "security-model-in-plain-words",
		"Use it from a model loop, Claude Code or Codex":  "use-it-from-a-model-loop-claude-code-or-codex",
		"Reading output: job_output":                      "reading-output-job_output",
		"A model's mistakes are tool results":             "a-models-mistakes-are-tool-results",
		"Every `.git` in a writable root is read-only":    "every-git-in-a-writable-root-is-read-only",
		"The default: `unrestricted`, network `on`":       "the-default-unrestricted-network-on",
		"One concept, three names":                        "one-concept-three-names",
		"Links [like this](x.md) and **bold**":            "links-like-this-and-bold",
		"Two  spaces -- and dashes":                       "two--spaces----and-dashes",
		"Ümlaut café":                                     "ümlaut-café",
		"Agent / session / job":                           "agent--session--job",
		"`DSH_SESSION_ID`":                                "dsh_session_id",
		"Cluster mode (NATS JetStream)":                   "cluster-mode-nats-jetstream",
		"What is guaranteed, and the test that proves it": "what-is-guaranteed-and-the-test-that-proves-it",
	} {
		if got := githubSlug(heading); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", heading, got, want)
		}
	}
	got := headingAnchors("# A\n\n## A\n\n```sh\n# not a heading\n```\n\n### A\n")
	for _, want := range []string{"a", "a-1", "a-2"} {
		if !got[want] {
			t.Errorf("repeated headings: anchors %v lack %q", got, want)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a fenced block was taken for a heading")
	}
}

// markdownPages lists the Markdown files under root, leaving out
// dependencies, test data and the git directory.
func markdownPages(t *testing.T, root string) []string {
	t.Helper()
	var pages []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata", "_build", "dist":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".md") {
			pages = append(pages, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

func readPage(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type link struct {
	target string
	line   int
}

var (
	// inlineLink is [text](target) or ![alt](target "title"); the text
	// may hold code spans but no brackets.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// refDefinition is a reference link's definition: [label]: target.
	refDefinition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	codeSpan      = regexp.MustCompile("`+[^`]*`+")
	scheme        = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// pageLinks returns the links of a page outside fenced code blocks and code
// spans, leaving out absolute URLs (a scheme, or //host).
func pageLinks(page string) []link {
	var links []link
	fence := ""
	for i, line := range strings.Split(page, "\n") {
		if f, ok := fenceMarker(line); ok {
			switch {
			case fence == "":
				fence = f
				continue
			case strings.HasPrefix(strings.TrimSpace(line), fence) && strings.Trim(strings.TrimSpace(line), fence[:1]) == "":
				fence = ""
				continue
			}
		}
		if fence != "" {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refDefinition.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if target == "" || scheme.MatchString(target) || strings.HasPrefix(target, "//") {
				continue
			}
			links = append(links, link{target: target, line: i + 1})
		}
	}
	return links
}

// fenceMarker reports whether line opens or closes a fenced code block,
// and with what (``` or ~~~, at least three).
func fenceMarker(line string) (string, bool) {
	s := strings.TrimLeft(line, " ")
	if len(line)-len(s) > 3 {
		return "", false
	}
	for _, c := range []string{"`", "~"} {
		n := len(s) - len(strings.TrimLeft(s, c))
		if n >= 3 {
			return strings.Repeat(c, n), true
		}
	}
	return "", false
}

var atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)

// headingAnchors returns the anchors GitHub gives the page's headings
// (ATX headings outside fenced code blocks; a repeated slug gets -1, -2, …)
// and the ids of HTML anchors written in the page.
func headingAnchors(page string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(page, "\n") {
		if f, ok := fenceMarker(line); ok {
			if fence == "" {
				fence = f
				continue
			}
			if strings.HasPrefix(strings.TrimSpace(line), fence) && strings.Trim(strings.TrimSpace(line), fence[:1]) == "" {
				fence = ""
				continue
			}
		}
		if fence != "" {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := githubSlug(m[2])
		if n, ok := seen[slug]; ok {
			seen[slug] = n + 1
			slug = fmt.Sprintf("%s-%d", slug, n+1)
		} else {
			seen[slug] = 0
		}
		anchors[slug] = true
	}
	return anchors
}

var (
	htmlAnchor   = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	headingLink  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	headingImage = regexp.MustCompile(`!\[[^\]]*\]\([^)]*\)`)
)

// githubSlug is GitHub's anchor for a heading: the rendered text (link
// targets and emphasis gone), lower-cased, every character that is not a
// letter, mark, digit, connector punctuation (_), space or hyphen removed,
// then each space made a hyphen.
func githubSlug(heading string) string {
	text := headingImage.ReplaceAllString(heading, "")
	text = headingLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-', unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsNumber(r), unicode.Is(unicode.Mn, r), unicode.Is(unicode.Mc, r), unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// checkLink checks one relative link of page: its path exists, and its
// anchor, if any, names a heading of the Markdown page it points into.
func checkLink(page string, l link, anchors map[string]map[string]bool) error {
	target, anchor, _ := strings.Cut(l.target, "#")
	dest := filepath.Clean(page)
	if target != "" {
		if strings.HasPrefix(target, "/") {
			return fmt.Errorf("an absolute path: GitHub resolves it against the site, not the repository")
		}
		dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(path.Clean(target)))
		if rel, err := filepath.Rel("..", dest); err != nil || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("leaves the repository")
		}
		if _, err := os.Stat(dest); err != nil {
			return fmt.Errorf("%s does not exist", shown(dest))
		}
	}
	if anchor == "" {
		if target == "" {
			return fmt.Errorf("an empty anchor")
		}
		return nil
	}
	if !strings.HasSuffix(dest, ".md") {
		return nil // a line of a source file, say: GitHub's, not a heading
	}
	a, ok := anchors[dest]
	if !ok {
		return fmt.Errorf("%s is not one of the pages checked", shown(dest))
	}
	if !a[anchor] {
		return fmt.Errorf("%s has no heading whose anchor is #%s", shown(dest), anchor)
	}
	return nil
}

// shown is a page's path as the repository names it.
func shown(p string) string {
	return filepath.ToSlash(strings.TrimPrefix(p, "../"))
}
