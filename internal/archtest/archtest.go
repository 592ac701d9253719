package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// floor is a group of packages (by module-relative path prefix) and its
// height: a package imports only from its own group or from lower floors.
type floor struct {
	group string // "" the root package; "connectors" covers connectors/<kind>
	n     int
}

// floors is the layering (see the package doc).
func floors() []floor {
	return []floor{
		{"decimal", 0}, {"internal/invariant", 0}, {"internal/clock", 0}, {"internal/testkit", 0}, {"internal/archtest", 0},
		{"", 1}, {"candle", 1}, {"internal/gen", 1},
		{"topology", 2},
		{"processors", 3},
		{"state", 4},
		{"connectors", 5},
		{"engine", 6},
		{"serve", 7}, {"internal/sinks", 7},
		{"cmd", 8}, {"deploy", 8}, {"scripts", 8},
	}
}

// floorOf returns the floor of the package at module-relative dir rel.
func floorOf(rel string) (floor, bool) {
	best, ok := floor{}, false
	for _, f := range floors() {
		if (rel == f.group || f.group != "" && strings.HasPrefix(rel, f.group+"/")) && (!ok || len(f.group) > len(best.group)) {
			best, ok = f, true
		}
	}
	return best, ok
}

// pkg is one package of the module: its non-test files and the module
// packages they import.
type pkg struct {
	rel     string
	files   []string            // module-relative paths
	imports map[string][]string // imported module-relative package → files importing it
}

// load parses the non-test Go files under root (a module whose path is
// mod), skipping testdata, tools, hidden directories and nested modules.
func load(root, mod string) (map[string]*pkg, []string, error) {
	pkgs := map[string]*pkg{}
	var problems []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (name == "testdata" || name == "tools" || name == "node_modules" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("parse %s: %w", rel, err)
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "." {
			dir = ""
		}
		p := pkgs[dir]
		if p == nil {
			p = &pkg{rel: dir, imports: map[string][]string{}}
			pkgs[dir] = p
		}
		p.files = append(p.files, rel)
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if path == mod || strings.HasPrefix(path, mod+"/") {
				q := strings.TrimPrefix(strings.TrimPrefix(path, mod), "/")
				p.imports[q] = append(p.imports[q], rel)
			}
		}
		return nil
	})
	return pkgs, problems, err
}

// Check returns the layering violations of the module at root (module path
// mod), one line each naming the file and the rule, sorted.
func Check(root, mod string) ([]string, error) {
	pkgs, problems, err := load(root, mod)
	if err != nil {
		return nil, err
	}
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	name := func(rel string) string {
		if rel == "" {
			return "the root package"
		}
		return rel
	}
	for _, p := range pkgs {
		pf, ok := floorOf(p.rel)
		if !ok {
			add("%s: package %s has no floor: give it one in floors (internal/archtest) so the layering covers it", p.files[0], name(p.rel))
			continue
		}
		for q, files := range p.imports {
			qf, ok := floorOf(q)
			if !ok {
				continue // reported for q itself
			}
			if qf.n > pf.n || qf.n == pf.n && qf.group != pf.group {
				add("%s: %s (floor %d) imports %s (floor %d): a package imports only from its own floor group or below (floors in internal/archtest)",
					files[0], name(p.rel), pf.n, name(q), qf.n)
			}
		}
	}
	// Named rules, through other packages of the module too.
	for _, p := range pkgs {
		for q, via := range reach(pkgs, p.rel) {
			file := via.file
			path := name(q)
			if via.through != "" {
				path += " (through " + via.through + ")"
			}
			switch {
			case under(p.rel, "connectors") && (under(q, "engine") || under(q, "processors") || under(q, "serve") || under(q, "cmd")):
				add("%s: connector %s imports %s: a connector never imports a processor or the engine", file, p.rel, path)
			case under(p.rel, "processors") && under(q, "connectors"):
				add("%s: %s imports %s: processors never import a concrete connector", file, p.rel, path)
			case under(p.rel, "serve") && under(q, "connectors"):
				add("%s: %s imports %s: serve never imports a connector (it reads stores through its own interfaces, filled by the commands)", file, p.rel, path)
			}
		}
	}
	clock, err := wallClock(root, pkgs)
	if err != nil {
		return nil, err
	}
	problems = append(problems, clock...)
	sort.Strings(problems)
	return problems, nil
}

func under(rel, group string) bool { return rel == group || strings.HasPrefix(rel, group+"/") }

// route says how a package reaches another: the file of the first import
// on the way, and the module package it goes through ("" for a direct
// import).
type route struct{ file, through string }

// reach returns every module package from reaches through imports of
// non-test files, with the route of a shortest path.
func reach(pkgs map[string]*pkg, from string) map[string]route {
	out := map[string]route{}
	type step struct {
		rel string
		r   route
	}
	var queue []step
	start := pkgs[from]
	for _, q := range slices.Sorted(maps.Keys(start.imports)) {
		out[q] = route{file: start.imports[q][0]}
		queue = append(queue, step{q, out[q]})
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		p := pkgs[s.rel]
		if p == nil {
			continue
		}
		for _, q := range slices.Sorted(maps.Keys(p.imports)) {
			if _, seen := out[q]; seen || q == from {
				continue
			}
			r := route{file: s.r.file, through: s.rel}
			if s.r.through != "" {
				r.through = s.r.through
			}
			out[q] = r
			queue = append(queue, step{q, r})
		}
	}
	return out
}

// wallClockFuncs are the functions of package time that read the wall
// clock or wait on it.
var wallClockFuncs = []string{"Now", "Since", "Until", "Sleep", "After", "Tick", "NewTimer", "NewTicker", "AfterFunc"}

// wallClock reports every call of a wallClockFuncs function in the
// non-test files of processors.
func wallClock(root string, pkgs map[string]*pkg) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	for _, p := range pkgs {
		if !under(p.rel, "processors") {
			continue
		}
		for _, rel := range p.files {
			f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, 0)
			if err != nil {
				return nil, fmt.Errorf("parse %s: %w", rel, err)
			}
			timeName := ""
			for _, im := range f.Imports {
				if path, _ := strconv.Unquote(im.Path.Value); path == "time" {
					timeName = "time"
					if im.Name != nil {
						timeName = im.Name.Name
					}
				}
			}
			if timeName == "" || timeName == "_" {
				continue
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if fn, ok := n.(*ast.FuncDecl); ok && isSystemClockNow(fn) {
					return false // the wall clock the engine injects in live runs
				}
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == timeName && x.Obj == nil && slices.Contains(wallClockFuncs, sel.Sel.Name) {
					pos := fset.Position(sel.Pos())
					out = append(out, fmt.Sprintf("%s:%d: uses time.%s: processors take time from the records and the injected Clock, never the wall clock",
						rel, pos.Line, sel.Sel.Name))
				}
				return true
			})
		}
	}
	return out, nil
}

// isSystemClockNow reports whether fn is the method Now of SystemClock, the
// Clock that reads the wall clock for live runs: the one place in processors
// that may.
func isSystemClockNow(fn *ast.FuncDecl) bool {
	if fn.Recv == nil || len(fn.Recv.List) != 1 || fn.Name.Name != "Now" {
		return false
	}
	id, ok := fn.Recv.List[0].Type.(*ast.Ident)
	return ok && id.Name == "SystemClock"
}
