// Command pkggraph writes the graph of this module's packages and their imports
// as Markdown with a Mermaid diagram and a list, for docs/packages.md.
//
// It works in three steps:
//
//  1. Run go list -deps over the module's packages twice, for the default
//     build and with -tags cuda (the only build tag that changes imports),
//     reading each package's import path, module, imports and, for a package
//     made of tests only (the root benchmark suite), its tests' imports.
//  2. Keep the module's own packages as nodes and draw an edge from each to
//     every module package it imports and to every other module it imports
//     from (one node per module); the standard library is left out. An edge
//     seen only with -tags cuda is marked so.
//  3. Write the nodes and edges in a stable order.
//
// Usage:
//
//	go run ./scripts/pkggraph > docs/packages.md
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// module is the path of this module; only its packages are nodes of their own.
const module = "github.com/inferbench/inferbench"

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pkggraph:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pkggraph", flag.ContinueOnError)
	fs.SetOutput(stderr)
	goCmd := fs.String("go", "go", "the go command to run go list with")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	g := newGraph()
	for _, tags := range []string{"", "cuda"} {
		out, err := goList(*goCmd, tags)
		if err != nil {
			return err
		}
		pkgs, err := parse(bytes.NewReader(out))
		if err != nil {
			return err
		}
		g.add(pkgs, tags == "cuda")
	}
	return g.write(stdout)
}

// listFormat prints one line per package: import path, module path, whether
// it is in the standard library, its number of non-test Go files, its imports
// and its tests' imports, separated by tabs (lists by spaces).
const listFormat = `{{.ImportPath}}	{{if .Module}}{{.Module.Path}}{{end}}	{{.Standard}}	{{len .GoFiles}}	{{join .Imports " "}}	{{join .TestImports " "}} {{join .XTestImports " "}}`

// goList runs go list -deps over the module's packages with the build tags.
func goList(goCmd, tags string) ([]byte, error) {
	cmd := exec.Command(goCmd, "list", "-e", "-deps", "-tags="+tags, "-f", listFormat, module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -tags=%q: %v: %s", tags, err, stderr.Bytes())
	}
	return out, nil
}

// pkg is one package as go list describes it.
type pkg struct {
	path, module string
	standard     bool
	testsOnly    bool // no non-test Go files: its tests' imports stand for its own
	imports      []string
}

// parse reads go list output in listFormat.
func parse(r io.Reader) ([]pkg, error) {
	var pkgs []pkg
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 6 {
			return nil, fmt.Errorf("go list line %q: %d fields, want 6", sc.Text(), len(f))
		}
		p := pkg{path: f[0], module: f[1], standard: f[2] == "true", testsOnly: f[3] == "0", imports: strings.Fields(f[4])}
		if p.testsOnly {
			p.imports = strings.Fields(f[5])
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, sc.Err()
}

// edge is an import from a module package (from) to a node (to).
type edge struct{ from, to string }

// graph holds the nodes and edges seen so far; a node is a module package's
// import path or another module's path.
type graph struct {
	packages map[string]bool // module packages, true if made of tests only
	modules  map[string]bool // other modules
	edges    map[edge]bool   // true if seen in the default build
	moduleOf map[string]string
}

func newGraph() *graph {
	return &graph{packages: map[string]bool{}, modules: map[string]bool{}, edges: map[edge]bool{},
		moduleOf: map[string]string{}}
}

// add adds one listing; cuda says it was made with -tags cuda.
func (g *graph) add(pkgs []pkg, cuda bool) {
	for _, p := range pkgs {
		g.moduleOf[p.path] = p.module
	}
	for _, p := range pkgs {
		if p.module != module || p.standard {
			continue
		}
		g.packages[p.path] = p.testsOnly
		for _, imp := range p.imports {
			to, ok := g.node(imp)
			if !ok || string(to) == p.path {
				continue
			}
			if !to.isModulePackage() {
				g.modules[string(to)] = true
			}
			e := edge{p.path, string(to)}
			g.edges[e] = g.edges[e] || !cuda
		}
	}
}

type nodeName string

func (n nodeName) isModulePackage() bool {
	return string(n) == module || strings.HasPrefix(string(n), module+"/")
}

// node returns the node an import lands on: the package itself in this
// module, the module path of another module, and false for the standard
// library, "C" and packages go list did not describe.
func (g *graph) node(imp string) (nodeName, bool) {
	m, ok := g.moduleOf[imp]
	switch {
	case imp == "C" || !ok || m == "":
		return "", false
	case m == module:
		return nodeName(imp), true
	}
	return nodeName(m), true
}

// label is how a node is shown: module packages relative to the module.
func (g *graph) label(n string) string {
	switch {
	case n == module:
		return "(root: benchmark suite and end-to-end tests)"
	case strings.HasPrefix(n, module+"/"):
		return strings.TrimPrefix(n, module+"/")
	}
	return n
}

func (g *graph) write(w io.Writer) error {
	if len(g.packages) == 0 {
		return errors.New("go list found no package of " + module)
	}
	var nodes []string
	for p := range g.packages {
		nodes = append(nodes, p)
	}
	slices.Sort(nodes)
	var mods []string
	for m := range g.modules {
		mods = append(mods, m)
	}
	slices.Sort(mods)
	id := map[string]string{}
	for i, n := range nodes {
		id[n] = fmt.Sprintf("p%d", i)
	}
	for i, m := range mods {
		id[m] = fmt.Sprintf("m%d", i)
	}
	var edges []edge
	for e := range g.edges {
		edges = append(edges, e)
	}
	slices.SortFunc(edges, func(a, b edge) int {
		return strings.Compare(a.from+"\x00"+a.to, b.from+"\x00"+b.to)
	})

	var b strings.Builder
	fmt.Fprintf(&b, "# Package graph\n\n")
	fmt.Fprintf(&b, "<!-- Generated by `go run ./scripts/pkggraph > docs/packages.md`; do not edit. -->\n\n")
	fmt.Fprintf(&b, "Every package of `%s` and what it imports, from `go list -deps` of the default build and of\n", module)
	fmt.Fprintf(&b, "`-tags cuda`. An arrow points from the importer to the imported package; a dotted arrow exists only\n")
	fmt.Fprintf(&b, "with `-tags cuda`. The standard library is left out; another module is one node (rounded). The root\n")
	fmt.Fprintf(&b, "package has test files only: its arrows are its tests' imports. See [ARCHITECTURE.md](ARCHITECTURE.md).\n\n")
	fmt.Fprintf(&b, "```mermaid\nflowchart LR\n")
	for _, n := range nodes {
		fmt.Fprintf(&b, "  %s[\"%s\"]\n", id[n], g.label(n))
	}
	for _, m := range mods {
		fmt.Fprintf(&b, "  %s(\"%s\")\n", id[m], m)
	}
	for _, e := range edges {
		arrow := "-->"
		if !g.edges[e] {
			arrow = "-.->"
		}
		fmt.Fprintf(&b, "  %s %s %s\n", id[e.from], arrow, id[e.to])
	}
	fmt.Fprintf(&b, "```\n\n## As a list\n\n")
	for _, n := range nodes {
		var to []string
		for _, e := range edges {
			if e.from != n {
				continue
			}
			s := "`" + g.label(e.to) + "`"
			if !g.edges[e] {
				s += " (cuda)"
			}
			to = append(to, s)
		}
		if len(to) == 0 {
			to = []string{"nothing of this module or another"}
		}
		fmt.Fprintf(&b, "- `%s` imports %s\n", g.label(n), strings.Join(to, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
