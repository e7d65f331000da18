package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// A record is one entry directly under results/<machine>/: a folder with
// everything inside it, or a loose file. The machine folder's README.md
// describes the machine and is not a record.
type record struct {
	Path        string `json:"path"`    // slash-separated, from the repository root
	Kind        string `json:"kind"`    // kindRecord or kindExperiment
	Machine     string `json:"machine"` // the folder under results/
	Date        string `json:"date"`    // YYYY-MM-DD
	DateFrom    string `json:"date_from"`
	Commit      string `json:"commit"` // the commit measured, or notRecorded
	CommitFrom  string `json:"commit_from"`
	GPU         string `json:"gpu"`
	CPU         string `json:"cpu"`
	HardwareSrc string `json:"hardware_from"`
	Command     string `json:"command"`
	CommandFrom string `json:"command_from"`
	Shows       string `json:"shows"`
	ShowsFrom   string `json:"shows_from"`
	Files       int    `json:"files"`
}

const (
	kindRecord     = "record"     // README.md links it: its figures are cited
	kindExperiment = "experiment" // everything else
	notRecorded    = "not recorded"
)

// Where a field came from, as the index states it.
const (
	fromOverride = "records.tsv" // hand-maintained, results/records.tsv
	fromName     = "name"        // the record's folder or file name
	fromReadme   = "readme"      // the record's README.md (or the .md file itself)
	fromMachine  = "machine-readme"
	fromConfig   = "config-lines" // gpu:/cpu:/commit: lines of its benchmark files
	fromHeader   = "file-header"  // a command on a benchmark file's first lines
	fromHost     = "host-lscpu"   // a "Model name:" line of lscpu output
	fromRunSh    = "run.sh"
	fromGit      = "git-added" // the commit that added the record's first file
)

// gitAdd is the commit that added a file and its date.
type gitAdd struct{ commit, date string }

// gitAdds maps slash paths under results/ to the commit that added them.
// The index takes it as a function so that tests need no git history.
type gitAdds func(root string) (map[string]gitAdd, error)

// gitLog reads, in one git call, the newest commit that added each file
// under results/ (renames count as adds, so a moved record dates from its
// move).
func gitLog(root string) (map[string]gitAdd, error) {
	cmd := exec.Command("git", "log", "--no-renames", "--diff-filter=A", "--name-only", "--format=%x00%h %cs", "--", "results")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git log of results/: %w", err)
	}
	adds := map[string]gitAdd{}
	var cur gitAdd
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\n")
		if rest, ok := strings.CutPrefix(line, "\x00"); ok {
			cur.commit, cur.date, _ = strings.Cut(rest, " ")
			continue
		}
		if line == "" {
			continue
		}
		if _, seen := adds[line]; !seen { // newest first: keep the newest add
			adds[line] = cur
		}
	}
	return adds, nil
}

// overrides are the hand-maintained fields of results/records.tsv: path ->
// field -> value, for what cannot be derived from the files.
type overrides map[string]map[string]string

// overrideFields are the fields records.tsv may set.
var overrideFields = []string{"date", "commit", "command", "shows"}

// readOverrides reads records.tsv: lines of path, field and value separated
// by tabs; blank lines and lines starting with # are skipped.
func readOverrides(file string) (overrides, error) {
	ov := overrides{}
	data, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return ov, nil
	}
	if err != nil {
		return nil, err
	}
	for i, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 || !slices.Contains(overrideFields, f[1]) || strings.TrimSpace(f[2]) == "" {
			return nil, fmt.Errorf("%s:%d: want path<TAB>field<TAB>value with field one of %v", file, i+1, overrideFields)
		}
		if ov[f[0]] == nil {
			ov[f[0]] = map[string]string{}
		}
		ov[f[0]][f[1]] = f[2]
	}
	return ov, nil
}

// Files directly under results/ that the index writes or reads, and the
// machine folders' own notes; they belong to no record.
const (
	indexJSON     = "results/index.json"
	indexREADME   = "results/README.md"
	overridesTSV  = "results/records.tsv"
	headlineMD    = "results/HEADLINE.md"
	machineREADME = "README.md"
)

// machineNotes is a machine folder's README.md, parsed for what it says of
// its loose files.
type machineNotes struct {
	rows     map[string]noteRow // entry name -> the table row naming it
	headings map[string]string  // entry name -> a heading naming it
}

// noteRow is what a table row of a machine README says of an entry.
type noteRow struct{ what, command, text string }

var (
	hashSuffix = regexp.MustCompile(`-([0-9a-f]{7,12})(?:[-.]|$)`)
	hashInText = regexp.MustCompile("(?:commit|at) `?([0-9a-f]{7,40})\\b")
	isoDate    = regexp.MustCompile(`\b20\d\d-[01]\d-[0-3]\d\b`)
	codeSpan   = regexp.MustCompile("`([^`]+)`")
	measures   = regexp.MustCompile(`-(?:test\.)?bench\b|\.sh\b|\.py\b|\bsweep\b|benchstat|perf_analyzer`)
	// A command starts with a program this project runs its measurements
	// with, after optional VAR=value assignments.
	commandStart = regexp.MustCompile(`^(?:[A-Z_]+=(?:"[^"]*"|'[^']*'|\S+)\s+)*(?:go (?:test|run)|sweep|benchstat|taskset|python3?|inferbench|perf_analyzer|root\.test|[\w.-]+\.test|scripts/\S+|\./\S+|\S+\.(?:sh|py))(?:\s|$)`)
)

// hasDigit reports whether s has a decimal digit: a hash suffix needs one,
// so that a word such as "-defaced" is not taken for a commit.
func hasDigit(s string) bool { return strings.ContainsAny(s, "0123456789") }

// collectRecords lists and describes every record under root/results.
func collectRecords(root string, adds map[string]gitAdd, ov overrides, cited map[string]bool) ([]record, []string, error) {
	machines, err := os.ReadDir(filepath.Join(root, "results"))
	if err != nil {
		return nil, nil, err
	}
	var recs []record
	var machineDirs []string
	for _, m := range machines {
		if !m.IsDir() {
			continue
		}
		machineDirs = append(machineDirs, m.Name())
		mdir := filepath.Join(root, "results", m.Name())
		notes := readMachineNotes(filepath.Join(mdir, machineREADME))
		entries, err := os.ReadDir(mdir)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range entries {
			if e.Name() == machineREADME && !e.IsDir() {
				continue
			}
			r, err := describeRecord(root, m.Name(), e, adds, ov, notes)
			if err != nil {
				return nil, nil, err
			}
			r.Kind = kindExperiment
			if cited[r.Path] {
				r.Kind = kindRecord
			}
			recs = append(recs, r)
		}
	}
	return recs, machineDirs, nil
}

// sources is what a record's fields are derived from.
type sources struct {
	name    string   // the entry's name under results/<machine>/
	files   []string // slash paths from the root
	readme  string   // its README.md, or the file itself when it is markdown
	row     noteRow  // the machine README's table row naming it
	hasRow  bool
	heading string // a heading of the machine README naming it
	bench   benchFacts
	first   gitAdd // the commit that added its first file
}

// describeRecord derives one record's metadata from its files, its README,
// the machine's README and git; records.tsv overrides any field.
func describeRecord(root, machine string, e fs.DirEntry, adds map[string]gitAdd, ov overrides, notes machineNotes) (record, error) {
	rel := path.Join("results", machine, e.Name())
	src := sources{name: e.Name()}
	if e.IsDir() {
		err := filepath.WalkDir(filepath.Join(root, filepath.FromSlash(rel)), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			sub, err := filepath.Rel(root, p)
			src.files = append(src.files, filepath.ToSlash(sub))
			return err
		})
		if err != nil {
			return record{}, err
		}
		src.readme = readText(filepath.Join(root, filepath.FromSlash(rel), "README.md"))
	} else {
		src.files = []string{rel}
		if strings.HasSuffix(e.Name(), ".md") {
			src.readme = readText(filepath.Join(root, filepath.FromSlash(rel)))
		}
	}
	src.row, src.hasRow = lookup(notes.rows, e.Name(), e.IsDir())
	src.heading, _ = lookup(notes.headings, e.Name(), e.IsDir())
	src.bench = scanBenchFiles(root, src.files)
	for _, f := range src.files {
		if a, ok := adds[f]; ok && (src.first.date == "" || a.date < src.first.date) {
			src.first = a
		}
	}

	r := record{Path: rel, Machine: machine, Files: len(src.files)}
	r.Date, r.DateFrom = src.date()
	r.Commit, r.CommitFrom = src.commit()
	r.GPU, r.CPU, r.HardwareSrc = src.hardware(machine)
	r.Command, r.CommandFrom = src.command()
	r.Shows, r.ShowsFrom = src.shows()
	for field, v := range ov[rel] {
		switch field {
		case "date":
			r.Date, r.DateFrom = v, fromOverride
		case "commit":
			r.Commit, r.CommitFrom = v, fromOverride
		case "command":
			r.Command, r.CommandFrom = v, fromOverride
		case "shows":
			r.Shows, r.ShowsFrom = v, fromOverride
		}
	}
	return r, nil
}

// date is the first date the record's README states, else the day git
// added its first file.
func (s sources) date() (string, string) {
	if d := isoDate.FindString(s.readme); d != "" {
		return d, fromReadme
	}
	if s.first.date != "" {
		return s.first.date, fromGit
	}
	return "uncommitted", fromGit
}

// commit is the commit measured: the name's suffix, the files' commit:
// lines, the README's or the machine README's words, else the commit that
// added the record.
func (s sources) commit() (string, string) {
	name := strings.TrimSuffix(s.name, path.Ext(s.name))
	if m := hashSuffix.FindAllStringSubmatch(name+".", -1); len(m) > 0 && hasDigit(m[len(m)-1][1]) {
		return m[len(m)-1][1], fromName
	}
	if len(s.bench.commits) > 0 {
		return strings.Join(s.bench.commits, ", "), fromConfig
	}
	if h := firstHash(s.readme); h != "" {
		return h, fromReadme
	}
	if h := firstHash(s.row.text); s.hasRow && h != "" {
		return h, fromMachine
	}
	if s.first.commit != "" {
		return s.first.commit, fromGit
	}
	return notRecorded, ""
}

// hardware is the GPU and CPU: the files' config lines, else lscpu output,
// else what the machine folder's name says.
func (s sources) hardware(machine string) (gpu, cpu, from string) {
	gpu, cpu, from = strings.Join(s.bench.gpus, ", "), strings.Join(s.bench.cpus, ", "), fromConfig
	if cpu == "" && len(s.bench.lscpu) > 0 {
		cpu, from = strings.Join(s.bench.lscpu, ", "), fromHost
	}
	if len(s.bench.gpus) == 0 && len(s.bench.cpus) == 0 && len(s.bench.lscpu) == 0 {
		from = fromName
	}
	mgpu, mcpu := machineHardware(machine)
	if gpu == "" {
		gpu = mgpu
	}
	if cpu == "" {
		cpu = mcpu
	}
	return gpu, cpu, from
}

// command is the record's shell scripts (run.sh and the like: what ran on
// the machine), else the command its README states, else one a benchmark
// file names on its first lines, else the machine README's line about it.
func (s sources) command() (string, string) {
	var scripts []string
	for _, f := range s.files {
		if strings.HasSuffix(f, ".sh") {
			scripts = append(scripts, f)
		}
	}
	switch {
	case len(scripts) > 0:
		return strings.Join(scripts, " "), fromRunSh
	case readmeCommand(s.readme) != "":
		return readmeCommand(s.readme), fromReadme
	case len(s.bench.headers) > 0:
		return strings.Join(s.bench.headers, "; "), fromHeader
	case s.hasRow && s.row.command != "":
		return s.row.command, fromMachine
	}
	return notRecorded, ""
}

// shows is the README's first heading, else the machine README's words.
func (s sources) shows() (string, string) {
	switch {
	case firstHeading(s.readme) != "":
		return firstHeading(s.readme), fromReadme
	case s.hasRow && s.row.what != "":
		return s.row.what, fromMachine
	case s.heading != "":
		return s.heading, fromMachine
	}
	return notRecorded, ""
}

// machineHardware names the hardware of a machine folder: results/nvidia-h200
// is an H200 machine's GPU, results/nvidia-h200-host that machine's CPU.
func machineHardware(machine string) (gpu, cpu string) {
	gpu, cpu = "none", notRecorded
	switch {
	case strings.HasSuffix(machine, "-host"):
	case strings.HasPrefix(machine, "nvidia-"):
		gpu = "NVIDIA " + strings.ToUpper(strings.TrimPrefix(machine, "nvidia-"))
	case strings.HasPrefix(machine, "amd-epyc"):
		cpu = "AMD EPYC"
	}
	return gpu, cpu
}

// firstHash returns the first commit hash that text names after "commit"
// or "at", or "".
func firstHash(text string) string {
	for _, m := range hashInText.FindAllStringSubmatch(text, -1) {
		if hasDigit(m[1]) {
			return m[1]
		}
	}
	return ""
}

// readText returns a file's contents, or "" when it cannot be read.
func readText(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	return string(b)
}

// firstHeading returns the text of a markdown document's first heading.
func firstHeading(md string) string {
	inFence := false
	for line := range strings.Lines(md) {
		if fenceLine.MatchString(line) {
			inFence = !inFence
			continue
		}
		if t, ok := strings.CutPrefix(strings.TrimSpace(line), "#"); ok && !inFence {
			return strings.TrimSpace(strings.TrimLeft(t, "#"))
		}
	}
	return ""
}

// readmeCommand returns the first measurement a README states: in a fenced
// block, the first line that runs a benchmark, a script or benchstat (build
// steps skipped), with its continuation lines; else such a code span.
func readmeCommand(md string) string {
	inFence := false
	var block []string
	for line := range strings.Lines(md) {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") {
			if inFence {
				for i, l := range block {
					if isMeasurement(l) {
						return joinContinued(block[i:])
					}
				}
			}
			inFence, block = !inFence, nil
			continue
		}
		if inFence {
			block = append(block, t)
		}
	}
	for _, m := range codeSpan.FindAllStringSubmatch(md, -1) {
		if f := strings.Fields(m[1]); len(f) > 1 && isMeasurement(strings.Join(f, " ")) {
			c := strings.Join(f, " ")
			return c
		}
	}
	return ""
}

// isMeasurement reports whether a line is a command that measures: it
// starts with a program and runs benchmarks, a script or benchstat.
func isMeasurement(line string) bool {
	return commandStart.MatchString(line) && measures.MatchString(line)
}

// joinContinued joins a shell command's backslash-continued lines.
func joinContinued(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		cont := strings.HasSuffix(l, "\\")
		b.WriteString(strings.TrimSpace(strings.TrimSuffix(l, "\\")))
		if !cont {
			break
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// benchFacts is what a record's benchmark-format files say of themselves.
type benchFacts struct {
	gpus, cpus, commits []string // distinct gpu:, cpu: and commit: config values
	lscpu               []string // distinct lscpu "Model name:" values
	headers             []string // "file: command" from the files' first lines
}

// scanBenchFiles reads the .txt and .log files of a record with benchfmt for
// their configuration, and their first lines for a stated command.
func scanBenchFiles(root string, files []string) benchFacts {
	var bf benchFacts
	add := func(list *[]string, v string) {
		if v != "" && !slices.Contains(*list, v) {
			*list = append(*list, v)
		}
	}
	for _, f := range files {
		if ext := path.Ext(f); ext != ".txt" && ext != ".log" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(data)) {
			if _, v, ok := strings.Cut(line, "Model name:"); ok && !strings.Contains(line, "BIOS") {
				add(&bf.lscpu, strings.TrimSpace(v))
			}
		}
		if cmd := headerCommand(data); cmd != "" {
			add(&bf.headers, path.Base(f)+": "+cmd)
		}
		rd := benchfmt.NewReader(bytes.NewReader(data), f)
		for rd.Scan() {
			res, ok := rd.Result().(*benchfmt.Result)
			if !ok {
				continue
			}
			for _, c := range res.Config {
				if !c.File {
					continue
				}
				switch c.Key {
				case "gpu":
					add(&bf.gpus, string(c.Value))
				case "cpu":
					add(&bf.cpus, string(c.Value))
				case "commit":
					add(&bf.commits, string(c.Value))
				}
			}
		}
	}
	return bf
}

// headerCommand returns the command a benchmark file states on one of its
// first lines ("# sweep -matrix ...", "command: root.test ..."), or "".
func headerCommand(data []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 0; n < 5 && sc.Scan(); n++ {
		t := strings.TrimSpace(sc.Text())
		t = strings.TrimSpace(strings.TrimPrefix(t, "#"))
		t = strings.TrimSpace(strings.TrimPrefix(t, "command:"))
		t = strings.TrimPrefix(t, "$ ")
		if isMeasurement(t) {
			return t
		}
	}
	return ""
}

// readMachineNotes parses a machine README's tables and headings for the
// entries they name in code spans or link texts.
func readMachineNotes(file string) machineNotes {
	notes := machineNotes{rows: map[string]noteRow{}, headings: map[string]string{}}
	md := readText(file)
	var header []string
	for line := range strings.Lines(md) {
		t := strings.TrimSpace(line)
		if h, ok := strings.CutPrefix(t, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			for _, n := range namedEntries(h) {
				if _, seen := notes.headings[n]; !seen {
					notes.headings[n] = h
				}
			}
			header = nil
			continue
		}
		if !strings.HasPrefix(t, "|") {
			header = nil
			continue
		}
		cells := tableCells(t)
		if header == nil {
			header = cells
			continue
		}
		if strings.HasPrefix(cells[0], "---") || strings.HasPrefix(cells[0], ":-") {
			continue
		}
		row := noteRow{text: t}
		for i, c := range cells {
			if i < len(header) {
				switch strings.ToLower(header[i]) {
				case "what":
					row.what = c
				case "command":
					row.command = c
				}
			}
		}
		if row.what == "" && len(cells) > 1 {
			row.what = cells[1]
		}
		for _, n := range namedEntries(cells[0]) {
			if _, seen := notes.rows[n]; !seen {
				notes.rows[n] = row
			}
		}
	}
	return notes
}

// lookup finds what a machine README says of an entry: under its name (a
// folder's with or without the trailing slash), else under the first
// pattern such as "*-benchstat.txt" that matches it.
func lookup[T any](m map[string]T, name string, dir bool) (T, bool) {
	if v, ok := m[name]; ok {
		return v, true
	}
	if v, ok := m[name+"/"]; ok && dir {
		return v, true
	}
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		pattern := strings.TrimSuffix(k, "/")
		if ok, _ := path.Match(pattern, name); ok && strings.Contains(k, "*") && (dir || !strings.HasSuffix(k, "/")) {
			return m[k], true
		}
	}
	var zero T
	return zero, false
}

// tableCells splits a markdown table row into trimmed cells.
func tableCells(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	cells := strings.Split(row, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// namedEntries returns the names in code spans and link texts of s that
// look like entries of a machine folder, at its top level: a file with an
// extension, a folder ending in "/", or a pattern of names ("*-cpu17-*").
func namedEntries(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		n := strings.TrimPrefix(m[1], "./")
		top := strings.TrimSuffix(n, "/")
		if strings.Contains(top, "/") || strings.Contains(n, " ") {
			continue
		}
		if strings.HasSuffix(n, "/") || path.Ext(n) != "" || strings.Contains(n, "*") {
			out = append(out, n)
		}
	}
	return out
}
