package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// index is results/index.json.
type index struct {
	Note     string   `json:"note"`
	Machines []string `json:"machines"` // folders under results/, each with a README.md
	Records  []record `json:"records"`

	hasOverrides, hasHeadline bool // whether records.tsv and HEADLINE.md exist, for links
}

// indexOptions holds the index subcommand's flags.
type indexOptions struct {
	root  string
	check bool
	git   gitAdds
}

// runIndex is "report index": it writes results/index.json and
// results/README.md from the files under results/, or with -check verifies
// that they are current, that every file belongs to a record, that no .diff
// file is kept and that every relative link of the READMEs resolves.
func runIndex(args []string, stdout, stderr io.Writer, git gitAdds) error {
	opts := indexOptions{git: git}
	fs := flag.NewFlagSet("report index", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: report index [-root dir] [-check]\n\nWrites %s and %s from the records under results/.\n\n", indexJSON, indexREADME)
		fs.PrintDefaults()
	}
	fs.StringVar(&opts.root, "root", ".", "the repository's root `dir`")
	fs.BoolVar(&opts.check, "check", false, "write nothing; fail when the index is stale, a file belongs to no record, a .diff file is kept or a relative link is broken")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("report index: %w", err)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("report index: unexpected argument %q", fs.Arg(0))
	}
	idx, problems, err := buildIndex(opts.root, opts.git)
	if err != nil {
		return fmt.Errorf("report index: %w", err)
	}
	js, md, err := renderIndex(idx)
	if err != nil {
		return fmt.Errorf("report index: %w", err)
	}
	outputs := []struct {
		name string
		data []byte
	}{{indexJSON, js}, {indexREADME, md}}
	if !opts.check {
		for _, o := range outputs {
			if err := os.WriteFile(filepath.Join(opts.root, filepath.FromSlash(o.name)), o.data, 0o644); err != nil {
				return fmt.Errorf("report index: %w", err)
			}
			fmt.Fprintln(stdout, o.name)
		}
		fmt.Fprintln(stdout, summaryLine(idx))
		return nil
	}
	for _, o := range outputs {
		old, err := os.ReadFile(filepath.Join(opts.root, filepath.FromSlash(o.name)))
		if err != nil || !bytes.Equal(old, o.data) {
			problems = append(problems, fmt.Sprintf("%s is not what the records give: run go run ./scripts/report index (a record not yet committed dates from the README's first date, else from git once committed)", o.name))
		}
	}
	broken, err := brokenLinks(opts.root)
	if err != nil {
		return fmt.Errorf("report index: %w", err)
	}
	for _, b := range broken {
		problems = append(problems, "broken link: "+b)
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		return fmt.Errorf("report index: %d problems", len(problems))
	}
	fmt.Fprintln(stdout, summaryLine(idx))
	return nil
}

// summaryLine counts the records and the commands they state.
func summaryLine(idx *index) string {
	cited, cmds := 0, 0
	for _, r := range idx.Records {
		if r.Kind == kindRecord {
			cited++
		}
		if r.Command != notRecorded {
			cmds++
		}
	}
	return fmt.Sprintf("%d records indexed (%d cited by README.md, %d experiments); command recorded for %d, not recorded for %d",
		len(idx.Records), cited, len(idx.Records)-cited, cmds, len(idx.Records)-cmds)
}

// buildIndex collects the records and the problems that -check reports
// besides a stale index: files that belong to no record, .diff files and
// records.tsv lines that name no record.
func buildIndex(root string, git gitAdds) (*index, []string, error) {
	adds, err := git(root)
	if err != nil {
		return nil, nil, err
	}
	ov, err := readOverrides(filepath.Join(root, filepath.FromSlash(overridesTSV)))
	if err != nil {
		return nil, nil, err
	}
	cited, err := citedRecords(root)
	if err != nil {
		return nil, nil, err
	}
	recs, machines, err := collectRecords(root, adds, ov, cited)
	if err != nil {
		return nil, nil, err
	}
	var problems []string
	top, err := os.ReadDir(filepath.Join(root, "results"))
	if err != nil {
		return nil, nil, err
	}
	own := []string{indexJSON, indexREADME, overridesTSV, headlineMD}
	for _, e := range top {
		if p := path.Join("results", e.Name()); !e.IsDir() && !slices.Contains(own, p) {
			problems = append(problems, fmt.Sprintf("%s belongs to no record: move it into results/<machine>/", p))
		}
	}
	for _, m := range machines {
		if _, err := os.Stat(filepath.Join(root, "results", m, machineREADME)); err != nil {
			problems = append(problems, fmt.Sprintf("results/%s has no README.md describing the machine", m))
		}
	}
	err = filepath.WalkDir(filepath.Join(root, "results"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".diff") {
			rel, _ := filepath.Rel(root, p)
			problems = append(problems, fmt.Sprintf("%s: keep experiments as commits, not .diff files", filepath.ToSlash(rel)))
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	for p := range ov {
		if !slices.ContainsFunc(recs, func(r record) bool { return r.Path == p }) {
			problems = append(problems, fmt.Sprintf("%s names %s, which is no record", overridesTSV, p))
		}
	}
	slices.Sort(problems)
	slices.SortFunc(recs, func(a, b record) int {
		if c := strings.Compare(b.Date, a.Date); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		return err == nil
	}
	return &index{
		Note:         "Generated by go run ./scripts/report index from the files under results/; do not edit.",
		Machines:     machines,
		Records:      recs,
		hasOverrides: exists(overridesTSV),
		hasHeadline:  exists(headlineMD),
	}, problems, nil
}

// renderIndex returns index.json and README.md.
func renderIndex(idx *index) (js, md []byte, err error) {
	js, err = json.MarshalIndent(idx, "", "\t")
	if err != nil {
		return nil, nil, err
	}
	js = append(js, '\n')
	var b bytes.Buffer
	writeIndexMarkdown(&b, idx)
	return js, b.Bytes(), nil
}

func writeIndexMarkdown(w *bytes.Buffer, idx *index) {
	headlineNote := ""
	if idx.hasHeadline {
		headlineNote = " into [HEADLINE.md](HEADLINE.md)"
	}
	fmt.Fprintf(w, `# The record

<!-- Generated by go run ./scripts/report index; do not edit. -->

Every measurement this project cites is kept here, raw, as the tools printed it. **A record is
each folder directly under results/<machine>/, with everything inside it, and each loose file
there**; the machine folder's own README.md describes the machine and is not a record. This page
and [index.json](index.json) list every record; CI (`+"`go run ./scripts/report index -check`"+`)
fails when a file belongs to no listed record, when this page or index.json is not what the
records give, or when a relative link of README.md, docs/*.md or a README under results/ is
broken.

A **record** is one that the repository's README.md links (its figures are cited there); every
other one is an **experiment**. Each has:

- **date**: the first date its README states, else the day git added its first file;
- **commit**: the commit measured, from the name's suffix (`+"`record-c0fbf3c`"+`), the files'
  `+"`commit:`"+` lines or the README; where none says, the commit that added the record, marked
  *(added)*, which is not necessarily the one measured;
- **GPU / CPU**: the benchmark files' `+"`gpu:`"+` and `+"`cpu:`"+` lines, else lscpu output
  kept with it, else the machine folder's name;
- **command**: its run.sh, else the command its README or the machine's README states, else
  one a benchmark file names on its first lines; "not recorded" where none exists;
- **shows**: its README's first heading, else the machine README's line about it, else a line
  written by hand in %s (path, field, value; also for corrections).

[index.json](index.json) says for each field where it came from. The headline figures of the
README are generated from records by `+"`go run ./scripts/report headline`"+`%s.

%s.

Machines: `, linkIf(idx.hasOverrides, "records.tsv", "records.tsv"), headlineNote, summaryLine(idx))
	for i, m := range idx.Machines {
		if i > 0 {
			w.WriteString(", ")
		}
		fmt.Fprintf(w, "[%s](%s/README.md)", m, m)
	}
	w.WriteString(".\n")
	for _, kind := range []struct{ kind, title, intro string }{
		{kindRecord, "Records (cited by README.md)", "Newest first."},
		{kindExperiment, "Experiments", "Newest first."},
	} {
		fmt.Fprintf(w, "\n## %s\n\n%s\n\n", kind.title, kind.intro)
		w.WriteString("| record | date | commit | machine | GPU / CPU | shows | command |\n|---|---|---|---|---|---|---|\n")
		for _, r := range idx.Records {
			if r.Kind != kind.kind {
				continue
			}
			rel := strings.TrimPrefix(r.Path, "results/")
			target := rel
			if r.Files > 1 || !strings.Contains(path.Base(rel), ".") {
				target = rel + "/"
			}
			commit := r.Commit
			if r.CommitFrom == fromGit {
				commit += " *(added)*"
			}
			hw := r.GPU
			if r.GPU == "none" {
				hw = r.CPU
			}
			fmt.Fprintf(w, "| [%s](%s) | %s | %s | %s | %s | %s | %s |\n",
				path.Base(rel), target, r.Date, commit, r.Machine, cell(hw), cell(r.Shows), commandCell(r))
		}
	}
}

// linkIf links text to target where the target exists, else leaves it
// plain.
func linkIf(exists bool, text, target string) string {
	if exists {
		return "[" + text + "](" + target + ")"
	}
	return text
}

// commandCell shows a record's command in the table: links to its scripts,
// the command in a code span, or "not recorded".
func commandCell(r record) string {
	switch r.CommandFrom {
	case fromRunSh:
		// A record of many calls lists its first scripts; index.json has
		// them all.
		const most = 3
		scripts := strings.Fields(r.Command)
		var links []string
		for _, s := range scripts[:min(most, len(scripts))] {
			rel := strings.TrimPrefix(s, "results/")
			links = append(links, fmt.Sprintf("[%s](%s)", strings.TrimPrefix(s, r.Path+"/"), rel))
		}
		if len(scripts) > most {
			links = append(links, fmt.Sprintf("and %d more", len(scripts)-most))
		}
		return strings.Join(links, ", ")
	case "":
		return notRecorded
	}
	if r.CommandFrom == fromMachine || strings.Contains(r.Command, "`") {
		// A machine README's cell is markdown already.
		return cell(r.Command)
	}
	c, more := r.Command, ""
	const most = 160
	if len(c) > most {
		c, more = c[:strings.LastIndex(c[:most], " ")], " ... (the rest in index.json)"
	}
	return cell("`"+c+"`") + more
}

// cell makes text safe for one markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
