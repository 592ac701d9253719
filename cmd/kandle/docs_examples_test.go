package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kandle/kandle/internal/testkit"
)

// docExample is one `kandle …` command found in the docs.
type docExample struct {
	where string   // file:line
	args  []string // after "kandle"
}

// The files a user reads: the README, docs/, and the comments of the
// topologies and manifests kandle ships.
func docFiles(t *testing.T, root string) []string {
	var files []string
	for _, pat := range []string{"README.md", "docs/*.md", "testdata/topologies/*.yaml", "deploy/*.yaml", "deploy/kubernetes/*.yaml", "deploy/Dockerfile"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 8 {
		t.Fatalf("found only %v", files)
	}
	return files
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// docExamples extracts every kandle command of a file: lines of fenced code
// blocks (with their \ continuations) and inline code spans.
func docExamples(t *testing.T, root, file string) []docExample {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, file)
	var out []docExample
	add := func(line int, cmd string) {
		if args, ok := kandleArgs(cmd); ok {
			out = append(out, docExample{where: rel + ":" + strconv.Itoa(line), args: args})
		}
	}
	md := strings.HasSuffix(file, ".md")
	inFence, cont, contLine := false, "", 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if md && strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			if cont == "" {
				contLine = n
			}
			if s, ok := strings.CutSuffix(strings.TrimRight(line, " "), "\\"); ok {
				cont += s + " "
				continue
			}
			add(contLine, cont+line)
			cont = ""
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			add(n, m[1])
		}
	}
	return out
}

// kandleArgs returns the arguments of cmd when it is a kandle command line
// (kandle first, after environment assignments or a "$ " prompt; or go run
// ./cmd/kandle), cut at the first shell operator or comment.
func kandleArgs(cmd string) ([]string, bool) {
	words := shellWords(cmd)
	for len(words) > 0 && (words[0] == "$" || strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-")) {
		words = words[1:]
	}
	switch {
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/kandle":
		words = words[3:]
	case len(words) > 0 && (words[0] == "kandle" || strings.HasSuffix(words[0], "/kandle")):
		words = words[1:]
	default:
		return nil, false
	}
	var args []string
	for _, w := range words {
		if w == "|" || w == "&&" || w == ";" || w == "#" || strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") || w == "<" {
			break
		}
		args = append(args, w)
	}
	if len(args) == 0 || strings.HasSuffix(args[0], ":") {
		return nil, false // the program's name in prose, not a command
	}
	return args, true
}

// shellWords splits like a shell: blanks separate words; quotes group.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// placeholders stand for values in synopsis lines (kandle replay -t FILE
// --from X --to Y); they become real values of the same kind.
var placeholders = map[string]string{
	"FILE": "testdata/topologies/crypto.yaml", "FILE…": "testdata/topologies/crypto.yaml",
	"X": "2026-01-01T00:00:00Z", "Y": "2026-01-02T00:00:00Z", "NAME": "history", "CMD": "run",
}

// Every kandle command in the README, docs/ and the comments of shipped
// topologies and manifests parses against the real CLI: the command exists
// and every flag is one of its flags with a valid value. The ones that need
// no broker, Docker or cloud (validate, docs, test, help) also run and must
// succeed, from the repository root as the docs assume.
func TestDocExamplesRun(t *testing.T) {
	root := testkit.RepoRoot(t)
	t.Chdir(root)
	known := map[string]bool{"help": true}
	for _, c := range commands() {
		known[c.name] = true
	}
	total, ran := 0, 0
	for _, f := range docFiles(t, root) {
		for _, ex := range docExamples(t, root, f) {
			var args []string
			for _, a := range ex.args {
				if a == "…" || a == "..." {
					continue
				}
				if v, ok := placeholders[a]; ok {
					a = v
					if ex.args[0] == "test" && v == placeholders["FILE"] {
						a = "testdata/topologies/crypto_test.yaml" // FILE of kandle test is a test file
					}
				}
				args = append(args, a)
			}
			if !known[args[0]] {
				t.Errorf("%s: kandle %s: no such command", ex.where, strings.Join(ex.args, " "))
				continue
			}
			total++
			var stdout, stderr bytes.Buffer
			if code := runMain(context.Background(), args, &stdout, &stderr, true); code != 0 {
				t.Errorf("%s: kandle %s: flags do not parse (exit %d):\n%s", ex.where, strings.Join(ex.args, " "), code, stderr.String())
				continue
			}
			if !runnable(args) {
				continue
			}
			ran++
			stdout.Reset()
			stderr.Reset()
			if code := runMain(context.Background(), args, &stdout, &stderr, false); code != 0 {
				t.Errorf("%s: kandle %s: exit %d:\n%s", ex.where, strings.Join(ex.args, " "), code, tailString(stderr.String(), 2000))
			}
		}
	}
	if total < 20 || ran < 5 {
		t.Fatalf("checked %d example commands and ran %d: the extraction missed the docs' examples", total, ran)
	}
	t.Logf("%d example commands parse; %d ran", total, ran)
}

// runnable reports whether a command runs here without brokers or cloud:
// validate and test of files in the repository, docs, help.
func runnable(args []string) bool {
	switch args[0] {
	case "docs", "help":
		return true
	case "validate", "test":
		files := 0
		for _, a := range args[1:] {
			if strings.HasPrefix(a, "-") {
				return false
			}
			if _, err := os.Stat(a); err != nil {
				return false // a name the reader substitutes (my-topology.yaml)
			}
			files++
		}
		return files > 0
	}
	return false
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// The README and docs/ link only to files inside the repository (or to the
// web): a relative link must name a file or folder that exists and must not
// climb out of the repository.
func TestDocLinksStayInRepo(t *testing.T) {
	root := testkit.RepoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, f := range append(files, filepath.Join(root, "README.md")) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			p := filepath.Clean(filepath.Join(filepath.Dir(f), target))
			if in, err := filepath.Rel(root, p); err != nil || in == ".." || strings.HasPrefix(in, "../") {
				t.Errorf("%s links to %s, outside the repository", rel, m[1])
				continue
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel, m[1])
			}
		}
	}
	if links < 3 {
		t.Fatalf("found only %d relative links: the pattern is broken", links)
	}
}
