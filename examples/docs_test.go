package examples_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, seen from this package's directory.
const root = ".."

// maxReadmeLines bounds README.md: it is the five-minute path, and detail
// goes to docs/.
const maxReadmeLines = 200

// update rewrites the documents' blocks from their sources instead of
// failing: go test ./examples/ -run Readme -update.
var update = flag.Bool("update", false, "rewrite README.md's and docs/'s code blocks and tshark output from their sources")

// block is a fenced code block of a markdown file.
type block struct {
	file   string
	line   int    // of the opening fence
	end    int    // of the closing fence
	lang   string // the fence's info string
	marker string // the comment line just before the fence, if it is one
	text   string // the lines between the fences, each ending in "\n"
}

// blocks returns the fenced code blocks of a markdown file.
func blocks(t *testing.T, path string) []block {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	var cur *block
	prev := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{file: path, line: n, lang: strings.TrimPrefix(line, "```")}
			if strings.HasPrefix(prev, "<!--") {
				cur.marker = prev
			}
		case cur != nil && line == "```":
			cur.end = n
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: code block not closed", path, cur.line)
	}
	return out
}

// docs lists README.md and docs/*.md.
func docs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

// source returns what a "<!-- code: PATH [FUNC] -->" marker names: the
// file, or the body of its function FUNC without the body's indentation.
func source(marker string) (string, error) {
	spec, ok := strings.CutPrefix(marker, "<!-- code: ")
	spec, ok2 := strings.CutSuffix(spec, " -->")
	fields := strings.Fields(spec)
	if !ok || !ok2 || len(fields) < 1 || len(fields) > 2 {
		return "", fmt.Errorf("marker %q: want <!-- code: PATH [FUNC] -->", marker)
	}
	src, err := os.ReadFile(filepath.Join(root, fields[0]))
	if err != nil || len(fields) == 1 {
		return string(src), err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, fields[0], src, parser.ParseComments)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != fields[1] || fn.Recv != nil {
			continue
		}
		body := string(src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset])
		var out strings.Builder
		for _, l := range strings.Split(strings.Trim(body, "\n"), "\n") {
			out.WriteString(strings.TrimPrefix(l, "\t") + "\n")
		}
		return out.String(), nil
	}
	return "", fmt.Errorf("%s has no function %s", fields[0], fields[1])
}

// TestReadmeCode checks that every Go code block of README.md and docs/ is
// the text of the compiled (and, with an Output comment, run) code its
// marker names, so the documents cannot drift from what builds.
func TestReadmeCode(t *testing.T) {
	n := 0
	for _, path := range docs(t) {
		bs := blocks(t, path)
		for i := len(bs) - 1; i >= 0; i-- { // last first: -update keeps earlier line numbers valid
			b := bs[i]
			if b.lang != "go" {
				if strings.HasPrefix(b.marker, "<!-- code:") {
					t.Errorf("%s:%d: a code marker before a %q block, not a go one", b.file, b.line, b.lang)
				}
				continue
			}
			n++
			if b.marker == "" {
				t.Errorf("%s:%d: go block without a <!-- code: PATH [FUNC] --> marker before it", b.file, b.line)
				continue
			}
			want, err := source(b.marker)
			if err != nil {
				t.Errorf("%s:%d: %v", b.file, b.line, err)
				continue
			}
			if b.text != want {
				if *update {
					replace(t, b, want)
					continue
				}
				t.Errorf("%s:%d: the block differs from %s; it should read (or run with -update):\n%s", b.file, b.line, b.marker, want)
			}
		}
	}
	if n == 0 {
		t.Fatal("no go code block found: the README shows a program")
	}
}

// TestReadmeLength keeps README.md the five-minute path.
func TestReadmeLength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move detail to docs/", n, maxReadmeLines)
	}
}

// replace rewrites the lines of block b in its file with text. Callers
// replace a file's blocks from its last to its first, so that the line
// numbers of those still to replace stay valid.
func replace(t *testing.T, b block, text string) {
	t.Helper()
	src, err := os.ReadFile(b.file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(src), "\n")
	out := strings.Join(lines[:b.line], "") + text + strings.Join(lines[b.end-1:], "")
	if err := os.WriteFile(b.file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s:%d: rewritten from its source", b.file, b.line)
}

// mdLink matches a markdown link's target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is GitHub's anchor for a heading: lower case, punctuation other
// than '-' and '_' dropped, spaces as '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fence := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(l, "#") {
			out[slug(strings.TrimLeft(l, "#"))] = true
		}
	}
	return out
}

// TestReadmeLinks checks that every relative link of README.md and docs/
// names a file of the repository and, with #anchor, one of its headings.
func TestReadmeLinks(t *testing.T) {
	for _, path := range docs(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dst := path
			if file != "" {
				dst = filepath.Join(filepath.Dir(path), file)
			}
			if _, err := os.Stat(dst); err != nil {
				t.Errorf("%s: link %s: %v", path, target, err)
				continue
			}
			if anchor != "" && !anchors(t, dst)[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor %q", path, target, dst, anchor)
			}
		}
	}
}
