// Package docs holds keel's documentation pages; its tests keep them true:
// every relative link in README.md and docs/*.md names a file of the
// repository, and every #anchor a heading of the page it points into.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// pages are the Markdown files whose links are checked, relative to the
// repository root.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md", "scenarios/README.md"}
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found")
	}
	for _, d := range docs {
		out = append(out, filepath.ToSlash(strings.TrimPrefix(d, ".."+string(filepath.Separator))))
	}
	return out
}

// link matches an inline Markdown link or image: [text](target) and
// ![alt](target), with an optional "title".
var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// inlineCode matches a code span, whose brackets are no links.
var inlineCode = regexp.MustCompile("`[^`]*`")

// links returns every link target of a Markdown text outside code blocks
// and code spans, each with its line number.
func links(text string) []struct {
	line   int
	target string
} {
	var out []struct {
		line   int
		target string
	}
	fenced := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced || strings.HasPrefix(l, "    ") {
			continue
		}
		l = inlineCode.ReplaceAllString(l, "")
		for _, m := range link.FindAllStringSubmatch(l, -1) {
			out = append(out, struct {
				line   int
				target string
			}{i + 1, m[1]})
		}
	}
	return out
}

// anchors returns the anchors GitHub makes for a Markdown text's headings:
// lower case, spaces to '-', punctuation other than '-' and '_' dropped,
// a repeated one suffixed -1, -2, ….
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		a := slug(h)
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// slug is GitHub's anchor of one heading.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"The audit, and the operator's way out", "the-audit-and-the-operators-way-out"},
		{"./test.sh: everything", "testsh-everything"},
		{"Cold migration, resize and evacuation", "cold-migration-resize-and-evacuation"},
		{"`keel_guest` programs", "keel_guest-programs"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

// TestLinksResolve checks every relative link and anchor of the README and
// the docs: a link to a file or directory of the repository that is not
// there, or to an anchor no heading of its page makes, fails. Links to
// other sites are not followed; a link out of the repository fails.
func TestLinksResolve(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	read := func(rel string) (string, error) {
		if s, ok := texts[rel]; ok {
			return s, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return "", err
		}
		texts[rel] = string(b)
		return string(b), nil
	}
	checked := 0
	for _, page := range pages(t) {
		text, err := read(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(text) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			where := fmt.Sprintf("%s:%d: link %s", page, l.line, l.target)
			file, frag, _ := strings.Cut(l.target, "#")
			target := page
			if file != "" {
				target = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
				if target == ".." || strings.HasPrefix(target, "../") {
					t.Errorf("%s: points outside the repository", where)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
					t.Errorf("%s: no such file in the repository (%s)", where, target)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s: an anchor into a file that is not Markdown", where)
				continue
			}
			body, err := read(target)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if !anchors(body)[frag] {
				t.Errorf("%s: %s has no heading with the anchor #%s", where, target, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links checked; the link pattern may be wrong", checked)
	}
}

// TestEveryPageIsInTheContents checks that the README's contents list names
// every page of docs/, so a newcomer finds each by name.
func TestEveryPageIsInTheContents(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, contents, ok := strings.Cut(string(readme), "\n## Documentation\n")
	if !ok {
		t.Fatal("README.md has no \"## Documentation\" section")
	}
	for _, p := range pages(t) {
		if !strings.HasPrefix(p, "docs/") {
			continue
		}
		if !strings.Contains(contents, "("+p+")") {
			t.Errorf("README.md's Documentation list does not link %s", p)
		}
	}
}
